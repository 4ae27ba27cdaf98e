(** Proofs for [Puexchange.v]: the three steps (reduce the source's pending
    axes, exchange, make the target's pending) keep the represented array
    of a partial value over uneven types, over any commutative monoid and
    whatever the padding holds; the plan exists for every valid problem;
    every type along it is within the padded bound ([puplan_peak]); it
    receives at least the uneven lower bound of the array types
    ([puplan_lower_bound]). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Uneven Unevenproof Uchecker Monoid Partial Partialproof
  Ucheckerproof Utraffic Utrafficproof Crossmesh Crossmeshproof Exchange Exchangeproof Puexchange.
Import ListNotations.

(** * Blocks depend on the used axes only *)

Lemma block_ext : forall m D c c', (forall a, In a (axes D) -> c a = c' a) -> block m D c = block m D c'.
Proof. intros. unfold block. apply mr_ext. auto. Qed.

Lemma axes_used : forall t D a, In D t -> In a (axes D) -> In a (used t).
Proof. intros t D a HD Ha. unfold used. apply in_flat_map. eauto. Qed.

Lemma tbox_ext : forall m t c c', (forall a, In a (used t) -> c a = c' a) -> tbox m t c = tbox m t c'.
Proof.
  intros m t c c' H. unfold tbox. apply map_ext_in. intros D HD.
  unfold ugidx, uvlen. rewrite (block_ext m D c c'); auto. intros a Ha. apply H. eapply axes_used; eauto.
Qed.

Lemma ugindex_ext2 : forall m t c c' i, (forall a, In a (used t) -> c a = c' a) ->
  ugindex m t c i = ugindex m t c' i.
Proof.
  intros m t c c' i H. unfold ugindex. apply map_ext_in. intros [D k] HDk. apply in_combine_l in HDk.
  unfold ugidx. cbn [fst snd]. rewrite (block_ext m D c c'); auto. intros a Ha. apply H. eapply axes_used; eauto.
Qed.

Lemma uvalid_pos_ext : forall m t c c' i, (forall a, In a (used t) -> c a = c' a) ->
  uvalid_pos m t c i -> uvalid_pos m t c' i.
Proof.
  intros m t c c' i H Hi. unfold uvalid_pos in *. induction Hi as [|D k t i Hk Hi IH]; constructor.
  - unfold uvlen in *. rewrite <- (block_ext m D c c'); auto. intros a Ha. apply H. simpl. apply in_or_app; auto.
  - apply IH. intros a Ha. apply H. simpl. apply in_or_app; auto.
Qed.

(** * The plan exists *)

Lemma pending_okb_spec : forall m P t, pending_okb m P t = true ->
  NoDup P /\ (forall a, In a P -> a < length m) /\ (forall a, In a P -> ~ In a (used t)).
Proof.
  intros m P t H. unfold pending_okb in H. apply andb_true_iff in H as [H H3]. apply andb_true_iff in H as [H1 H2].
  apply nodupb_spec in H1. rewrite forallb_forall in H2, H3. split; [auto|split].
  - intros a Ha. apply Nat.ltb_lt. auto.
  - intros a Ha Hu. specialize (H3 a Ha). apply negb_true_iff in H3. apply memb_spec in Hu. congruence.
Qed.

(** An exchange schedule exists only for a valid problem. *)
Lemma exchange_valid : forall m t t' pss, exchange m t t' = Some pss -> uvalid_problem m t t'.
Proof.
  intros m t t' pss H. unfold exchange, xplan in H.
  destruct (wf_unevenb m t) eqn:E1; [|discriminate]. destruct (wf_unevenb m t') eqn:E2; [|discriminate].
  destruct (nat_list_eqb (map gsize t) (map gsize t')) eqn:E3;
    [|rewrite !andb_false_r in H; discriminate].
  apply wf_unevenb_spec in E1, E2. apply nat_list_eqb_spec in E3. split; auto.
Qed.

(** **Totality**: every valid partial uneven problem gets its plan. *)
Theorem puplan_total : forall m src dst, uvalid_problem m (ptyp src) (ptyp dst) ->
  pending_okb m (paxes src) (ptyp src) = true -> pending_okb m (paxes dst) (ptyp dst) = true ->
  exists st pss rs, puplan_problem m src dst = Some (st, pss, rs).
Proof.
  intros m src dst Hv H1 H2. unfold puplan_problem, puvalidb. rewrite uproblem_error_none, H1, H2 by auto.
  cbn [andb]. destruct (exchange_total m _ _ Hv) as [pss E]. rewrite E.
  match goal with |- exists _ _ _, match ?a with _ => _ end = _ => destruct a as [[[? ?] ?]|] end; eauto.
Qed.

(** The planner's choice of reduction, without its schedules: [puplan_start]
    is the first component of [puplan_problem]'s answer. *)
Lemma puplan_start_spec : forall m src dst,
  puplan_start m src dst = option_map (fun x => fst (fst x)) (puplan_problem m src dst).
Proof.
  intros m src dst. unfold puplan_start, puplan_problem. cbv zeta.
  destruct (puvalidb m src dst) eqn:Ev; [|reflexivity].
  assert (Hv : uvalid_problem m (ptyp src) (ptyp dst)).
  { unfold puvalidb in Ev. destruct (uproblem_error m (ptyp src) (ptyp dst)) eqn:Ep; [discriminate|].
    apply uproblem_error_spec. exact Ep. }
  destruct (exchange_total m _ _ Hv) as [pss Ex]. rewrite Ex.
  unfold pu_received. rewrite (proj1 (uexchange_lower_bound m _ _ pss Ex Hv)).
  destruct (paxes src) as [|a P] eqn:EP; [reflexivity|].
  destruct (scatter_dim m (ptyp src) (a :: P) (seq 0 (length (ptyp src)))) as [[d t1]|]; [|reflexivity].
  destruct (exchange m t1 (ptyp dst)) as [pss1|] eqn:E1.
  - pose proof (exchange_valid _ _ _ _ E1) as Hv1. rewrite (uproblem_error_none _ _ _ Hv1).
    unfold pu_rs_received. rewrite (proj1 (uexchange_lower_bound m _ _ pss1 E1 Hv1)).
    destruct (fold_right plus 0 _ <? fold_right plus 0 _); reflexivity.
  - destruct (uproblem_error m t1 (ptyp dst)) eqn:Ep1; [reflexivity|].
    destruct (exchange_total m _ _ (uproblem_error_spec _ _ _ Ep1)) as [pss1 E1']. congruence.
Qed.

(** * The data *)

Lemma used_range : forall m t, wf_uneven m t -> forall a, In a (used t) -> a < length m.
Proof.
  intros m t [_ [HF _]] a Ha. unfold used in Ha. apply in_flat_map in Ha as [D [HD Ha]].
  rewrite Forall_forall in HF. apply (HF D HD), Ha.
Qed.

(** The reduction leaves, at every valid position of the array type it
    leaves, the array's element: an all-reduce, or a reduce-scatter the
    slice rule accepts. *)
Lemma reduced_rep : forall M m src st (A : list nat -> carrier M) x, wf_uneven m (ptyp src) ->
  (st = PUAllReduce \/ exists d t1, st = PUScatter d t1 /\ uapply m (ptyp src) (DynSlice d (paxes src)) = Ok t1) ->
  urepresents M m src A x -> urep A m (pu_mid src st) (pu_reduced M m src st x).
Proof.
  intros M m src st A x Ht Hst Hx c i Hc Hi.
  destruct Hst as [->|[d [t1 [-> Hu]]]]; cbn [pu_mid pu_reduced] in *.
  - apply Hx; auto.
  - apply (uapply_spec m _ _ _ Ht) in Hu.
    destruct (usrc_sound m _ _ _ c i Ht Hu Hc Hi) as [c' [i' [E [Hc' [Hi' Hg]]]]].
    cbn [usrc] in E. rewrite E. unfold usource in E. destruct (_ <? _); [|discriminate].
    injection E as <- <-. rewrite <- Hg. apply Hx; auto.
Qed.

(** The exchange, from any array type [t0] whose local arrays hold the
    array at every valid position, leaves it at every valid position of the
    target's. *)
Lemma exchange_rep : forall M m t0 t' pss (A : list nat -> carrier M) y,
  exchange m t0 t' = Some pss -> urep A m t0 y -> urep A m t' (pu_exchanged M m t0 t' pss y).
Proof.
  intros M m t0 t' pss A y Ex Hy c i Hc Hi. unfold pu_exchanged.
  pose proof (exchange_valid _ _ _ _ Ex) as Hv.
  pose proof Hv as [Ht [Ht' _]]. assert (Hm : wf_mesh m) by apply Ht.
  set (j := rank m c). assert (Hj : j < ndevices m) by (apply rank_lt; auto).
  assert (Hcj : forall a, In a (used t') -> c a = coords_of_rank m j a).
  { intros a Ha. symmetry. apply coords_of_rank_rank; auto. eapply used_range; eauto. }
  rewrite (tbox_ext m t' c (coords_of_rank m j)) by exact Hcj.
  rewrite (uexchange_correct m t0 t' pss Ex Hv (carrier M) A y).
  - rewrite <- (ugindex_ext2 m t' c) by exact Hcj. reflexivity.
  - intros r' k Hr' Hk. apply Hy; auto. apply coords_of_rank_valid; auto.
  - exact Hj.
  - apply (uvalid_pos_ext m _ c); auto.
Qed.

(** The make-pending, from local arrays that hold the array at every valid
    position of the target's array type. *)
Lemma pending_rep : forall M m dst (A : list nat -> carrier M) z,
  wf_uneven m (ptyp dst) -> pending_okb m (paxes dst) (ptyp dst) = true -> urep A m (ptyp dst) z ->
  urepresents M m dst A (pu_make_pending M m dst z).
Proof.
  intros M m dst A z Ht' Hd Hz. apply pending_okb_spec in Hd as [HndQ [HrQ HuQ]].
  assert (Hm : wf_mesh m) by apply Ht'.
  intros c i Hc Hi. unfold gsum, pu_make_pending.
  assert (Hpos : 0 < nprod m (paxes dst)) by (apply nprod_pos; auto).
  assert (Hmr : forall k, k < nprod m (paxes dst) -> mr m (paxes dst) (set_digits m (paxes dst) c k) = k).
  { intros k Hk. apply set_digits_mr; auto; intros a Ha; apply Hm, HrQ; auto. }
  rewrite msum_seq_first; [|exact Hpos|].
  2:{ intros k Hk. rewrite Hmr by lia. destruct (k =? 0) eqn:E; [apply Nat.eqb_eq in E; lia|reflexivity]. }
  rewrite Hmr by auto. cbn [Nat.eqb].
  set (root := set_digits m (paxes dst) c 0).
  assert (Hroot : valid m root) by (apply set_digits_valid; auto).
  assert (Hcr : forall a, In a (used (ptyp dst)) -> c a = root a).
  { intros a Ha. unfold root. symmetry. apply set_digits_other. intro HQ. exact (HuQ a HQ Ha). }
  rewrite Hz; auto.
  - f_equal. symmetry. apply ugindex_ext2. exact Hcr.
  - apply (uvalid_pos_ext m _ c); auto.
Qed.

Lemma scatter_dim_spec : forall m t P ds d t1, scatter_dim m t P ds = Some (d, t1) ->
  uapply m t (DynSlice d P) = Ok t1.
Proof.
  intros m t P ds. induction ds as [|d0 ds IH]; cbn [scatter_dim]; intros d t1 H; [discriminate|].
  destruct (uapply m t (DynSlice d0 P)) eqn:E; [|auto]. injection H as <- <-. exact E.
Qed.

(** What the planner returns: a valid problem, the exchange's schedule
    from the array type the reduction leaves ([pu_mid]), and either an
    all-reduce with [pu_received]'s counts, or a reduce-scatter whose type
    is the slice rule's ([uapply] of [DynSlice d] with the source's pending
    axes) with [pu_rs_received]'s. *)
Lemma puplan_inv : forall m src dst st pss rs, puplan_problem m src dst = Some (st, pss, rs) ->
  uvalid_problem m (ptyp src) (ptyp dst) /\
  pending_okb m (paxes src) (ptyp src) = true /\ pending_okb m (paxes dst) (ptyp dst) = true /\
  exchange m (pu_mid src st) (ptyp dst) = Some pss /\
  match st with
  | PUAllReduce => rs = pu_received m src dst pss
  | PUScatter d t1 => uapply m (ptyp src) (DynSlice d (paxes src)) = Ok t1 /\ rs = pu_rs_received m src dst t1 pss
  end.
Proof.
  intros m src dst st pss rs H.
  unfold puplan_problem in H. destruct (puvalidb m src dst) eqn:Hv; [|discriminate].
  unfold puvalidb in Hv. destruct (uproblem_error m (ptyp src) (ptyp dst)) eqn:Hpe; [discriminate|].
  apply uproblem_error_spec in Hpe. apply andb_true_iff in Hv as [Hs Hd].
  destruct (exchange m (ptyp src) (ptyp dst)) as [pss0|] eqn:Ex; [|discriminate].
  split; [exact Hpe|]. split; [exact Hs|]. split; [exact Hd|].
  destruct (paxes src) as [|a P] eqn:EP.
  - injection H as <- <- <-. auto.
  - destruct (scatter_dim m (ptyp src) (a :: P) (seq 0 (length (ptyp src)))) as [[d t1]|] eqn:Esd.
    + destruct (exchange m t1 (ptyp dst)) as [pss1|] eqn:Ex1.
      * destruct (_ <? _).
        -- injection H as <- <- <-. split; [exact Ex1|]. split; [|reflexivity].
           eapply scatter_dim_spec; eauto.
        -- injection H as <- <- <-. auto.
      * injection H as <- <- <-. auto.
    + injection H as <- <- <-. auto.
Qed.

(** **Partial and uneven, end to end**: for every plan the planner returns,
    every commutative monoid (sum, max, min) and every global array [A]: if
    the source's padded local arrays represent [A] (at every valid position
    the reduction over the pending group is [A]'s element), whatever they
    hold at padding positions, then after the steps (all-reduce or
    reduce-scatter, exchange, make-pending) the target's do. *)
Theorem puexec_correct : forall M m src dst st pss rs (A : list nat -> carrier M)
    (x : coords -> list nat -> carrier M),
  puplan_problem m src dst = Some (st, pss, rs) ->
  urepresents M m src A x -> urepresents M m dst A (puexec M m src dst st pss x).
Proof.
  intros M m src dst st pss rs A x H Hx.
  destruct (puplan_inv m src dst st pss rs H) as [[Ht [Ht' _]] [_ [Hd [Ex Hst]]]].
  unfold puexec. apply pending_rep; auto.
  apply (exchange_rep M m (pu_mid src st) (ptyp dst) pss A); auto.
  apply reduced_rep; auto.
  destruct st as [|d t1]; [left; reflexivity|right; destruct Hst as [Hu _]; eauto].
Qed.

(** * Memory *)

(** The reduction never grows the padded buffer: an all-reduce keeps the
    source's array type, a reduce-scatter slices it
    ([Unevenproof.ustep_slice_padded]). *)
Lemma pu_mid_padded : forall m src dst st pss rs, puplan_problem m src dst = Some (st, pss, rs) ->
  usize_padded m (pu_mid src st) <= usize_padded m (ptyp src).
Proof.
  intros m src dst st pss rs H.
  destruct (puplan_inv m src dst st pss rs H) as [[Ht _] [_ [_ [_ Hst]]]].
  destruct st as [|d t1]; cbn [pu_mid]; [lia|].
  destruct Hst as [Hu _]. apply (uapply_spec m _ _ _ Ht) in Hu.
  inversion Hu as [op t' Hs E1 E2|]; subst. apply (ustep_slice_padded m _ d (paxes src)); auto.
Qed.

(** **Peak, partial and uneven**: every array type the data passes through
    (the source's, the one the reduction leaves, the target's) has a padded
    buffer within [ubound], the larger padded buffer of the two ends, so the
    plan's peak (the largest of them, as [Uchecker.upeak_of] counts) is
    exactly [ubound], the least any plan reaches
    ([Ucheckerproof.ucheck_peak_ge]); the exchange step is the one the
    uneven checker accepts, with its peak [ubound] of its two ends. *)
Theorem puplan_peak : forall m src dst st pss rs, puplan_problem m src dst = Some (st, pss, rs) ->
  Forall (fun t => usize_padded m t <= ubound m (ptyp src) (ptyp dst)) (pu_types src dst st) /\
  upeak_of m (pu_types src dst st) = ubound m (ptyp src) (ptyp dst) /\
  uecheck m (pu_mid src st) (ptyp dst) [Exch (ptyp dst)]
    = Ok (mkureport [pu_mid src st; ptyp dst] (ubound m (pu_mid src st) (ptyp dst)) [exchange_recv m pss]) /\
  ubound m (pu_mid src st) (ptyp dst) <= ubound m (ptyp src) (ptyp dst).
Proof.
  intros m src dst st pss rs H.
  pose proof (pu_mid_padded m src dst st pss rs H) as Hmid.
  destruct (puplan_inv m src dst st pss rs H) as [_ [_ [_ [Ex _]]]].
  assert (HF : Forall (fun t => usize_padded m t <= ubound m (ptyp src) (ptyp dst)) (pu_types src dst st)).
  { unfold pu_types, ubound. repeat constructor; lia. }
  split; [exact HF|]. split.
  - apply Nat.le_antisymm; [apply upeak_of_le; exact HF|].
    unfold ubound. apply Nat.max_lub; apply upeak_of_ge; unfold pu_types; simpl; auto.
  - split; [apply uecheck_exchange; auto; eapply exchange_valid; eauto|].
    unfold ubound. lia.
Qed.

(** * Traffic *)

(** **Traffic lower bound, partial and uneven**: the exchange receives
    exactly the lower bound from the array type it starts at
    ([Exchangeproof.uexchange_lower_bound]); a device needs at least as much
    from there as from the source's (a reduce-scatter leaves it holding
    validly only elements it held validly before), so every device receives
    in the exchange at least [Utraffic.uneed] of the array types, and the
    exchange's worst device, and the plan's received counts summed, at least
    [Utraffic.ulower_bound] of the array types. Positions only: the
    reduction's own traffic is not bounded. *)
Theorem puplan_lower_bound : forall m src dst st pss rs, puplan_problem m src dst = Some (st, pss, rs) ->
  exchange_recv m pss = ulower_bound m (pu_mid src st) (ptyp dst) /\
  (forall j, j < ndevices m ->
     uneed m (ptyp src) (ptyp dst) (coords_of_rank m j) <= Crossmesh.traffic j (nth j pss [])) /\
  In (exchange_recv m pss) rs /\
  ulower_bound m (ptyp src) (ptyp dst) <= exchange_recv m pss /\
  ulower_bound m (ptyp src) (ptyp dst) <= fold_right plus 0 rs.
Proof.
  intros m src dst st pss rs H.
  destruct (puplan_inv m src dst st pss rs H) as [Hpe [_ [_ [Ex Hst]]]].
  pose proof Hpe as [Ht [_ Hg]]. assert (Hm : wf_mesh m) by apply Ht.
  pose proof (exchange_valid _ _ _ _ Ex) as Hv1.
  destruct (uexchange_lower_bound _ _ _ _ Ex Hv1) as [Hrx Hdev].
  (* a device needs at least as much from [pu_mid] as from the source *)
  assert (Hmono : (forall c, valid m c -> uneed m (ptyp src) (ptyp dst) c <= uneed m (pu_mid src st) (ptyp dst) c) /\
                  ulower_bound m (ptyp src) (ptyp dst) <= ulower_bound m (pu_mid src st) (ptyp dst)).
  { destruct st as [|d t1]; cbn [pu_mid]; [split; auto|].
    destruct Hst as [Hu _]. apply (uapply_spec m _ _ _ Ht) in Hu.
    destruct Hv1 as [_ [_ Hg1]].
    apply ulower_bound_mono; auto.
    - apply gsize_length; exact Hg.
    - apply gsize_length; exact Hg1.
    - intros c i Hc Hi. eapply uslice_held; eauto. }
  destruct Hmono as [Hc Hlb].
  assert (Hin : In (exchange_recv m pss) rs).
  { destruct st as [|d t1]; [|destruct Hst as [_ Hst]]; subst rs.
    - unfold pu_received, pu_figures. apply in_or_app. right. left. reflexivity.
    - unfold pu_rs_received, pu_rs_figures. right. left. reflexivity. }
  split; [exact Hrx|]. split.
  - intros j Hj. rewrite Hdev by exact Hj. apply Hc, coords_of_rank_valid, Hm.
  - split; [exact Hin|]. split; [lia|].
    pose proof (fold_plus_In rs _ Hin). lia.
Qed.
