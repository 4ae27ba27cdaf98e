(** What [Puchecker.pucheck] guarantees of every plan it accepts: the data
    (over any commutative monoid), the peak and the traffic lower bound. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Uneven Unevenproof Uchecker Ucheckerproof Monoid Partial
  Crossmesh Exchange Exchangeproof Utraffic Utrafficproof Puexchange Puexchangeproof Puchecker.
Import ListNotations.

Lemma puvalidb_spec : forall m src dst, puvalidb m src dst = true ->
  uvalid_problem m (ptyp src) (ptyp dst) /\
  pending_okb m (paxes src) (ptyp src) = true /\ pending_okb m (paxes dst) (ptyp dst) = true.
Proof.
  intros m src dst H. unfold puvalidb in H.
  destruct (uproblem_error m (ptyp src) (ptyp dst)) eqn:Hpe; [discriminate|].
  apply uproblem_error_spec in Hpe. apply andb_true_iff in H as [H1 H2]. auto.
Qed.

Lemma pu_reduction_spec : forall m src p st rest, pu_reduction m src p = Some (st, rest) ->
  st = PUAllReduce \/ exists d t1, st = PUScatter d t1 /\ uapply m (ptyp src) (DynSlice d (paxes src)) = Ok t1.
Proof.
  intros m src p st rest H. unfold pu_reduction in H.
  destruct (paxes src) as [|a P] eqn:EP; [injection H as <- _; auto|].
  destruct p as [|[c|t|xs|d xs|xs] p]; try discriminate.
  - destruct (nat_list_eqb xs (a :: P)); [injection H as <- _; auto|discriminate].
  - destruct (nat_list_eqb xs (a :: P)); [|discriminate].
    destruct (uapply m (ptyp src) (DynSlice d (a :: P))) as [t1|] eqn:E; [|discriminate].
    injection H as <- _. right. exists d, t1. auto.
Qed.

Lemma pucheck_inv : forall m src dst p r, pucheck m src dst p = Ok r ->
  exists st rest mid es r0,
    puvalidb m src dst = true /\ pu_reduction m src p = Some (st, rest) /\
    pu_before_pending dst rest = Some mid /\ pu_esteps mid = Some es /\
    uecheck m (pu_mid src st) (ptyp dst) es = Ok r0 /\
    r = mkpureport (src :: pu_red_types src st ++ map (mkptype []) (tl (utypes r0))
                        ++ (match paxes dst with [] => [] | _ => [dst] end))
                   (Nat.max (usize_padded m (ptyp src)) (upeak r0))
                   (pu_red_received m src st ++ ureceived r0 ++ (match paxes dst with [] => [] | _ => [0] end)).
Proof.
  intros m src dst p r H. unfold pucheck in H.
  destruct (puvalidb m src dst) eqn:Hv; [|discriminate]. cbn [negb] in H.
  destruct (pu_reduction m src p) as [[st rest]|] eqn:Hr; [|discriminate].
  destruct (pu_before_pending dst rest) as [mid|] eqn:Hb; [|discriminate].
  destruct (pu_esteps mid) as [es|] eqn:He; [|discriminate].
  destruct (uecheck m (pu_mid src st) (ptyp dst) es) as [r0|[i e]] eqn:Hu; [|discriminate].
  injection H as <-. exists st, rest, mid, es, r0. repeat split; auto.
  destruct (paxes dst); reflexivity.
Qed.

(** What the uneven checker with exchanges accepts is a valid problem, its
    types within its peak, the ends within too, and it receives at least
    the uneven lower bound. *)
Lemma uecheck_facts : forall m t t' es r, uecheck m t t' es = Ok r ->
  uvalid_problem m t t' /\ Forall (fun u => usize_padded m u <= upeak r) (utypes r) /\
  ubound m t t' <= upeak r /\ ulower_bound m t t' <= fold_right plus 0 (ureceived r).
Proof.
  intros m t t' es r H. destruct (uecheck_spec m t t' es r H) as [[cs [_ Hc]]|[_ [Hv [pss [Ex ->]]]]].
  - split; [apply ucheck_ok in Hc as [Hv _]; exact Hv|]. split; [apply (ucheck_peak m t t' cs r Hc)|].
    split; [apply (ucheck_peak_ge m t t' cs r Hc)|apply (ucheck_traffic_lower_bound m t t' cs r Hc)].
  - cbn [utypes upeak ureceived]. split; [exact Hv|]. split.
    + unfold ubound. repeat constructor; lia.
    + split; [lia|]. destruct (uexchange_lower_bound m t t' pss Ex Hv) as [-> _]. cbn. lia.
Qed.

(** * Data *)

Lemma mid_rep : forall M m t0 t' es r (A : list nat -> carrier M) y,
  uecheck m t0 t' es = Ok r -> urep A m t0 y -> urep A m t' (pu_mid_exec M m t0 t' es y).
Proof.
  intros M m t0 t' es r A y H Hy. unfold pu_mid_exec.
  destruct (uecheck_spec m t0 t' es r H) as [[cs [Ecs Hc]]|[-> [_ [pss [Ex _]]]]].
  - rewrite Ecs. apply ucheck_ok in Hc as [[Hs _] [Htr [Hl _]]].
    pose proof (uexec_trace (carrier M) A (munit M) m t0 cs _ _ Htr Hs y Hy) as E. rewrite Hl in E. exact E.
  - cbn [colls]. rewrite Ex. apply exchange_rep; auto.
Qed.

(** **Partial and uneven, any accepted plan**: for every plan [pucheck]
    accepts, every commutative monoid (sum, max, min) and every global array
    [A]: if the source's padded local arrays represent [A] (at every valid
    position the reduction over the pending group is [A]'s element),
    whatever they hold at padding positions, then after the plan's steps
    ([puexec_plan]: the reduction, the collectives or the exchange, the
    make-pending) the target's do. *)
Theorem pucheck_correct : forall M m src dst p r (A : list nat -> carrier M) (x : coords -> list nat -> carrier M),
  pucheck m src dst p = Ok r -> urepresents M m src A x -> urepresents M m dst A (puexec_plan M m src dst p x).
Proof.
  intros M m src dst p r A x H Hx.
  destruct (pucheck_inv m src dst p r H) as [st [rest [mid [es [r0 [Hv [Hr [Hb [He [Hu _]]]]]]]]]].
  destruct (puvalidb_spec m src dst Hv) as [[Ht [Ht' _]] [_ Hd]].
  unfold puexec_plan. rewrite Hr, Hb, He.
  apply pending_rep; auto.
  apply (mid_rep M m (pu_mid src st) (ptyp dst) es r0); auto.
  apply reduced_rep; auto. eapply pu_reduction_spec; eauto.
Qed.

(** **Peak, partial and uneven**: every type along an accepted plan has a
    padded buffer within the report's peak, and so have both ends. *)
Theorem pucheck_peak : forall m src dst p r, pucheck m src dst p = Ok r ->
  Forall (fun t => usize_padded m (ptyp t) <= pupeak r) (putypes r) /\
  ubound m (ptyp src) (ptyp dst) <= pupeak r.
Proof.
  intros m src dst p r H.
  destruct (pucheck_inv m src dst p r H) as [st [rest [mid [es [r0 [Hv [Hr [Hb [He [Hu ->]]]]]]]]]].
  destruct (uecheck_facts _ _ _ _ _ Hu) as [_ [HF [Hub _]]].
  unfold ubound in *. cbn [putypes pupeak]. split; [|lia].
  constructor; [cbn [ptyp]; lia|]. apply Forall_app. split.
  - unfold pu_red_types. destruct (paxes src); repeat constructor. cbn [ptyp]. lia.
  - apply Forall_app. split.
    + apply Forall_map. cbn [ptyp]. destruct (utypes r0) as [|u us]; cbn [tl]; [constructor|].
      apply Forall_cons_iff in HF as [_ HF]. eapply Forall_impl; [|exact HF]. intros u' Hu'. cbv beta in Hu'. lia.
    + destruct (paxes dst); repeat constructor. cbn [ptyp]. lia.
Qed.

Lemma fold_plus_app : forall l l', fold_right plus 0 (l ++ l') = fold_right plus 0 l + fold_right plus 0 l'.
Proof. induction l as [|x l IH]; intros l'; cbn; [lia|]. rewrite IH. lia. Qed.

(** **Traffic lower bound, partial and uneven**: an accepted plan receives,
    summed over its steps, at least [Utraffic.ulower_bound] of the array
    types (positions only: the reduction's own traffic is not bounded). *)
Theorem pucheck_lower_bound : forall m src dst p r, pucheck m src dst p = Ok r ->
  ulower_bound m (ptyp src) (ptyp dst) <= fold_right plus 0 (pureceived r).
Proof.
  intros m src dst p r H.
  destruct (pucheck_inv m src dst p r H) as [st [rest [mid [es [r0 [Hv [Hr [Hb [He [Hu ->]]]]]]]]]].
  destruct (uecheck_facts _ _ _ _ _ Hu) as [Hv1 [_ [_ Hlb]]].
  destruct (puvalidb_spec m src dst Hv) as [[Ht [_ Hg]] _]. assert (Hm : wf_mesh m) by apply Ht.
  assert (Hmono : ulower_bound m (ptyp src) (ptyp dst) <= ulower_bound m (pu_mid src st) (ptyp dst)).
  { destruct (pu_reduction_spec m src p st rest Hr) as [->|[d [t1 [-> Hu1]]]]; cbn [pu_mid]; [lia|].
    apply (uapply_spec m _ _ _ Ht) in Hu1. destruct Hv1 as [_ [_ Hg1]].
    apply ulower_bound_mono; auto.
    - apply gsize_length; exact Hg.
    - apply gsize_length; exact Hg1.
    - intros c i Hc Hi. eapply uslice_held; eauto. }
  cbn [pureceived]. rewrite !fold_plus_app. lia.
Qed.

(** The planner's plan, through the checker: what [puplan_checked] returns
    is accepted by [pucheck] with the report returned, so [pucheck_correct],
    [pucheck_peak] and [pucheck_lower_bound] hold of it. *)
Theorem puplan_checked_ok : forall m src dst p r, puplan_checked m src dst = Ok (p, r) ->
  pucheck m src dst p = Ok r.
Proof.
  intros m src dst p r H. unfold puplan_checked in H.
  destruct (puplan_start m src dst) as [st|]; [|discriminate].
  destruct (pucheck m src dst (puplan_steps src dst st)) eqn:E; [|discriminate].
  injection H as <- <-. exact E.
Qed.

Lemma uapply_slice_nil : forall m t d t1, uapply m t (DynSlice d []) = Ok t1 -> False.
Proof. intros m t d t1 H. cbn in H. destruct (nth_error t d); discriminate. Qed.

(** **Totality**: every valid partial uneven problem gets the planner's
    plan through the checker. *)
Theorem puplan_checked_total : forall m src dst, uvalid_problem m (ptyp src) (ptyp dst) ->
  pending_okb m (paxes src) (ptyp src) = true -> pending_okb m (paxes dst) (ptyp dst) = true ->
  exists p r, puplan_checked m src dst = Ok (p, r).
Proof.
  intros m src dst Hv H1 H2.
  destruct (puplan_total m src dst Hv H1 H2) as [st [pss [rs Hpp]]].
  destruct (puplan_inv m src dst st pss rs Hpp) as [_ [_ [_ [Ex Hst]]]].
  pose proof (exchange_valid _ _ _ _ Ex) as Hv1.
  unfold puplan_checked. rewrite puplan_start_spec, Hpp. cbn [option_map fst].
  assert (Hval : puvalidb m src dst = true) by (unfold puvalidb; rewrite uproblem_error_none, H1, H2 by auto; reflexivity).
  assert (Hred : pu_reduction m src (puplan_steps src dst st)
                 = Some (st, PUExch (ptyp dst) :: match paxes dst with [] => [] | Q => [PUPending Q] end)).
  { unfold pu_reduction, puplan_steps. destruct st as [|d t1].
    - destruct (paxes src) as [|a P]; [reflexivity|]. cbn [app]. rewrite (proj2 (nat_list_eqb_spec _ _) eq_refl).
      reflexivity.
    - destruct Hst as [Hu _]. destruct (paxes src) as [|a P] eqn:EP; [exfalso; eapply uapply_slice_nil; eauto|].
      cbn [app]. rewrite (proj2 (nat_list_eqb_spec _ _) eq_refl), Hu. reflexivity. }
  assert (Hbef : pu_before_pending dst (PUExch (ptyp dst) :: match paxes dst with [] => [] | Q => [PUPending Q] end)
                 = Some [PUExch (ptyp dst)]).
  { unfold pu_before_pending. destruct (paxes dst) as [|a Q]; [reflexivity|]. cbn [rev app].
    rewrite (proj2 (nat_list_eqb_spec _ _) eq_refl). reflexivity. }
  unfold pucheck. rewrite Hval, Hred, Hbef. cbn [negb pu_esteps].
  rewrite (uecheck_exchange m _ _ pss Hv1 Ex). eauto.
Qed.
