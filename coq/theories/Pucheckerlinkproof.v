(** [Puchecker.pucheck]'s figures against the data semantics ([Puchecker.puexec_plan]):
    every device's buffer under every type along an accepted plan is within
    the reported peak ([pucheck_device_memory]); where the plan's middle is
    collectives, each of them gives every device at most the step's
    reported figure of valid elements from other devices, counted on
    [Uchecker.usrc], the read [Uchecker.uexec] makes there
    ([pucheck_colls_recv]; [Utrafficproof.ufrom_others_le_urecv] per step);
    where it is the exchange, the exchange gives every device at most its
    reported figure of valid positions read from other devices, counted on
    the pieces [Crossmesh.assemble] reads ([pucheck_exch_recv]). The
    reduction's figure: [Pucheckerreduceproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Semantics Trafficproof Uneven Unevenproof Uchecker Ucheckerproof Monoid Partial
  Crossmesh Crossmeshproof Exchange Exchangeproof Utraffic Utrafficproof Puexchange Puexchangeproof Puchecker Pucheckerproof.
Import ListNotations.

(** **Per-device memory, partial and uneven**: under every type along a
    plan [pucheck] accepts, every device's padded buffer (the product of
    its block sizes, [usize Padded]) and the valid part of it
    ([usize Chunked]) hold at most the report's peak. *)
Theorem pucheck_device_memory : forall m src dst p r, pucheck m src dst p = Ok r ->
  forall t c, In t (putypes r) -> usize Padded m (ptyp t) c <= pupeak r /\ usize Chunked m (ptyp t) c <= pupeak r.
Proof.
  intros m src dst p r H t c Hin.
  destruct (pucheck_peak m src dst p r H) as [HF _].
  rewrite Forall_forall in HF. specialize (HF t Hin).
  rewrite usize_padded_eq. split; [exact HF|]. pose proof (usize_chunked_le m (ptyp t) c). lia.
Qed.

(** Along a trace of the uneven checker, step [k] gives every device at most
    the [k]-th reported figure from other devices. *)
Lemma utrace_from_others : forall m t p ts rs, utrace m t p ts rs -> wf_uneven m t ->
  forall k op t0 t1 c, nth_error p k = Some op -> nth_error ts k = Some t0 -> nth_error ts (S k) = Some t1 ->
  valid m c -> ufrom_others m t0 op t1 c <= nth k rs 0.
Proof.
  intros m t p ts rs Htr. induction Htr as [t|t op t1 p ts rs Hs Htr IH]; intros Ht k op' t0 t2 c Hp Hk HSk Hc.
  - destruct k; discriminate.
  - destruct k as [|k].
    + cbn in Hp, Hk, HSk. injection Hp as <-. injection Hk as <-.
      inversion Htr; subst; cbn in HSk; injection HSk as <-; apply ufrom_others_le_urecv; auto.
    + cbn in Hp, Hk, HSk |- *. apply (IH (ucstep_wf m t op t1 Ht Hs) k op' t0 t2 c); auto.
Qed.

(** **Per-step traffic of the collectives, partial and uneven**: when the
    middle of a plan [pucheck] accepts is collectives [cs] (no exchange),
    the report's received figures are the reduction's, then one per
    collective along the uneven checker's trace [ts] of [cs] from the
    reduction's type, then the make-pending's; and collective [k], from
    type [nth k ts] to [nth (S k) ts], gives every device at most the
    [k]-th of those figures of valid elements from other devices
    ([Utrafficproof.ufrom_others], on [Uchecker.usrc], the read
    [Uchecker.uexec] makes, which is what [puexec_plan] runs there). *)
Theorem pucheck_colls_recv : forall m src dst p r st rest mid es cs,
  pucheck m src dst p = Ok r -> pu_reduction m src p = Some (st, rest) ->
  pu_before_pending dst rest = Some mid -> pu_esteps mid = Some es -> colls es = Some cs ->
  exists ts rs post, utrace m (pu_mid src st) cs ts rs /\
    pureceived r = pu_red_received m src st ++ rs ++ post /\
    forall k op t t1 c, nth_error cs k = Some op -> nth_error ts k = Some t -> nth_error ts (S k) = Some t1 ->
      valid m c -> ufrom_others m t op t1 c <= nth k rs 0.
Proof.
  intros m src dst p r st rest mid es cs H Hr Hb He Hc.
  destruct (pucheck_inv m src dst p r H) as [st' [rest' [mid' [es' [r0 [Hv [Hr' [Hb' [He' [Hu Er]]]]]]]]]].
  rewrite Hr in Hr'. injection Hr' as <- <-. rewrite Hb in Hb'. injection Hb' as <-.
  rewrite He in He'. injection He' as <-.
  destruct (uecheck_spec _ _ _ _ _ Hu) as [[cs' [Hc' Hck]]|[-> _]]; [|discriminate].
  rewrite Hc in Hc'. injection Hc' as <-.
  apply ucheck_ok in Hck as [[Hw _] [Htr _]].
  exists (utypes r0), (ureceived r0), (match paxes dst with [] => [] | _ => [0] end).
  split; [exact Htr|]. split; [rewrite Er; reflexivity|].
  intros k op t t1 c Hk Ht Ht1 Hvc. exact (utrace_from_others m _ cs _ _ Htr Hw k op t t1 c Hk Ht Ht1 Hvc).
Qed.

(** * The exchange *)

(** Position [i] of device [c]'s block under [t'] is one the exchange
    ([Puexchange.pu_exchanged], by [Crossmesh.assemble]) reads from another
    device: the piece it finds for the position's global index comes from
    another rank. *)
Definition xfrom_other (m : mesh) (t' : atype) (pss : list (list piece)) (c : coords) (i : list nat) : bool :=
  match find (fun q => in_boxb (shift (tbox m t' c) i) (pbox q)) (nth (rank m c) pss []) with
  | Some q => negb (psrc q =? rank m c)
  | None => false
  end.

(** How many valid positions of its block device [c] gets from other devices in the exchange. *)
Definition xfrom_others (m : mesh) (t' : atype) (pss : list (list piece)) (c : coords) : nat :=
  length (filter (xfrom_other m t' pss c) (uvindices m t' c)).

Lemma shift_inj : forall T i1 i2, length i1 = length T -> length i2 = length T -> shift T i1 = shift T i2 -> i1 = i2.
Proof.
  induction T as [|iv T IH]; intros [|x1 i1] [|x2 i2] H1 H2 E; cbn in *; try discriminate; auto.
  injection E as Ex E. f_equal; [lia|]. apply IH; auto.
Qed.

Lemma unshift_in : forall B p, in_boxb p B = true -> Forall2 (fun n k => k < n) (map snd B) (unshift B p).
Proof.
  induction B as [|[s l] B IH]; intros [|x p] H; cbn in *; try discriminate; constructor.
  - apply andb_true_iff in H as [H _]. unfold insideb in H. cbn in H.
    apply andb_true_iff in H as [H1 H2]. apply Nat.leb_le in H1. apply Nat.ltb_lt in H2. lia.
  - apply andb_true_iff in H as [_ H]. auto.
Qed.

(** At most [vol B] positions of a list on which [shift T] is injective land in [B]. *)
Lemma count_in_box : forall T B (l : list (list nat)), NoDup l -> (forall i, In i l -> length i = length T) ->
  length (filter (fun i => in_boxb (shift T i) B) l) <= vol B.
Proof.
  intros T B l Hnd Hl. unfold vol. rewrite <- row_major_length.
  apply (length_le_inj _ _ (fun i => unshift B (shift T i))).
  - apply NoDup_filter. exact Hnd.
  - intros x y Hx Hy E. apply filter_In in Hx as [Hx Hbx]. apply filter_In in Hy as [Hy Hby].
    apply shift_inj with T; auto.
    rewrite <- (shift_unshift B (shift T x) Hbx), <- (shift_unshift B (shift T y) Hby), E. reflexivity.
  - intros x Hx. apply filter_In in Hx as [_ Hb]. apply row_major_In. apply unshift_in. exact Hb.
Qed.

(** Positions read from another rank are at most the volume of the pieces
    from other ranks. *)
Lemma found_other_le : forall T j (l : list (list nat)) ps, NoDup l -> (forall i, In i l -> length i = length T) ->
  length (filter (fun i => match find (fun q => in_boxb (shift T i) (pbox q)) ps with
                           | Some q => negb (psrc q =? j) | None => false end) l) <= Crossmesh.traffic j ps.
Proof.
  intros T j l ps Hnd Hl. induction ps as [|q ps IH].
  - cbn. rewrite filter_none; cbn; auto.
  - unfold Crossmesh.traffic, lsum. cbn [fold_right]. fold (lsum (fun q => if psrc q =? j then 0 else vol (pbox q)) ps).
    fold (Crossmesh.traffic j ps).
    eapply Nat.le_trans; [apply (filter_length_cover _ _ (fun i => in_boxb (shift T i) (pbox q) && negb (psrc q =? j)))|].
    apply Nat.add_le_mono.
    + destruct (psrc q =? j) eqn:E.
      * rewrite filter_none; cbn; [lia|]. intros x _. rewrite andb_false_r. reflexivity.
      * eapply Nat.le_trans; [|apply (count_in_box T (pbox q) l Hnd Hl)].
        apply filter_length_mono. intros x _ H. apply andb_true_iff in H as [H _]. exact H.
    + eapply Nat.le_trans; [|exact IH]. apply filter_length_mono. intros x _ H.
      cbn [find] in H. destruct (in_boxb (shift T x) (pbox q)); cbn in H; [|rewrite andb_true_r in H; exact H].
      destruct (negb (psrc q =? j)); discriminate.
Qed.

(** The exchange gives every device at most its figure from other devices. *)
Lemma xfrom_others_le : forall m t' pss c, valid m c ->
  xfrom_others m t' pss c <= exchange_recv m pss.
Proof.
  intros m t' pss c Hc. unfold xfrom_others.
  eapply Nat.le_trans; [apply (found_other_le (tbox m t' c) (rank m c))|].
  - apply uvindices_NoDup.
  - intros i Hi. apply uvindices_In, uvalid_pos_iff in Hi. unfold tbox. rewrite map_length. apply Hi.
  - rewrite exchange_recv_nth. apply fold_max_ge. apply in_map_iff. exists (rank m c). split; auto.
    unfold ranks. apply in_seq. pose proof (rank_lt m c Hc). lia.
Qed.

(** **Traffic of the exchange, partial and uneven**: when the middle of a
    plan [pucheck] accepts is the exchange, the report's received figures
    are the reduction's, then the exchange's ([Exchange.exchange_recv] of
    its schedule, the one [puexec_plan] assembles from), then the
    make-pending's; and the exchange gives every device at most that
    figure of valid positions read from other devices ([xfrom_others]). *)
Theorem pucheck_exch_recv : forall m src dst p r st rest mid es,
  pucheck m src dst p = Ok r -> pu_reduction m src p = Some (st, rest) ->
  pu_before_pending dst rest = Some mid -> pu_esteps mid = Some es -> colls es = None ->
  exists pss post, exchange m (pu_mid src st) (ptyp dst) = Some pss /\
    pureceived r = pu_red_received m src st ++ [exchange_recv m pss] ++ post /\
    forall c, valid m c -> xfrom_others m (ptyp dst) pss c <= exchange_recv m pss.
Proof.
  intros m src dst p r st rest mid es H Hr Hb He Hc.
  destruct (pucheck_inv m src dst p r H) as [st' [rest' [mid' [es' [r0 [Hv [Hr' [Hb' [He' [Hu Er]]]]]]]]]].
  rewrite Hr in Hr'. injection Hr' as <- <-. rewrite Hb in Hb'. injection Hb' as <-.
  rewrite He in He'. injection He' as <-.
  destruct (uecheck_spec _ _ _ _ _ Hu) as [[cs' [Hc' _]]|[_ [_ [pss [Ex Er0]]]]]; [congruence|].
  exists pss, (match paxes dst with [] => [] | _ => [0] end). split; [exact Ex|]. split.
  - rewrite Er, Er0. reflexivity.
  - intros c Hvc. apply xfrom_others_le. exact Hvc.
Qed.
