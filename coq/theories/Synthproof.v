(** What the synthesizer returns: always a plan the checker accepts
    ([synthesize_correct]); when flagged, one that validated, hence within
    the memory bound ([synthesize_memory]), in normal form
    ([synthesize_normal_form]), and whose gathers receive exactly the growth
    in local size ([synthesize_gather_traffic]). When the flag is set is
    [Constructproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Validate Normalform Synth.
Import ListNotations.

(** * [pick] keeps a validated candidate *)

(** The report [pick_with_r] returns is the validator's for the plan it keeps. *)
Lemma pick_with_r_valid : forall v G ps p r, pick_with_r v G ps = Some (p, r) -> v p = Some r.
Proof.
  intros v G ps p r. unfold pick_with_r.
  assert (H : forall ps acc, (forall q rq k, snd acc = Some (q, rq, k) -> v q = Some rq) ->
    forall q rq k, snd (fold_left (pick_step v G) ps acc) = Some (q, rq, k) -> v q = Some rq).
  { induction ps0 as [|x ps0 IH]; simpl; intros acc Hacc q rq k Hf; [eapply Hacc; eauto|].
    eapply IH; [|exact Hf]. intros q' rq' k' E. unfold pick_step in E.
    destruct (existsb (plan_eqb x) (fst acc)); [eapply Hacc; eauto|]. cbn [snd] in E.
    destruct (v x) as [rx|] eqn:Ev; [|eapply Hacc; eauto].
    destruct (snd acc) as [[[q0 r0] k0]|] eqn:Ea.
    - destruct (better (cost G x rx) k0).
      + inversion E; subst. exact Ev.
      + eapply Hacc; eauto.
    - inversion E; subst. exact Ev. }
  destruct (snd (fold_left _ ps ([], None))) as [[[q rq] k]|] eqn:E; simpl; intros Hp; inversion Hp; subst.
  eapply H; [|exact E]. intros; discriminate.
Qed.

Lemma pick_some : forall m src dst ps p,
  pick m src dst ps = Some p -> exists r, validate m src dst p = Some r.
Proof.
  intros m src dst ps p. unfold pick, pick_with.
  destruct (pick_with_r _ _ ps) as [[q r]|] eqn:E; simpl; intros Hp; inversion Hp; subst.
  apply pick_with_r_valid in E. rewrite validator_spec in E. eauto.
Qed.

Lemma pick_validated : forall m src dst p ps r, validate m src dst p = Some r ->
  pick m src dst (p :: ps) <> None.
Proof.
  intros m src dst p ps r Hp. unfold pick, pick_with, pick_with_r. simpl. set (G := glue m src dst).
  assert (H : forall ps acc, snd acc <> None -> snd (fold_left (pick_step (validator m src dst) G) ps acc) <> None).
  { induction ps0 as [|q ps0 IH]; simpl; intros acc Hacc; auto. apply IH.
    unfold pick_step. destruct (existsb (plan_eqb q) (fst acc)); auto. cbn [snd].
    rewrite validator_spec. destruct (validate m src dst q) as [rq|]; auto.
    destruct (snd acc) as [[[q0 r0] k0]|]; [|congruence].
    destruct (better (cost G q rq) k0); congruence. }
  assert (Hs : snd (pick_step (validator m src dst) G ([], None) p) <> None)
    by (unfold pick_step; simpl; rewrite validator_spec, Hp; discriminate).
  specialize (H ps _ Hs).
  destruct (snd (fold_left _ ps _)); simpl; congruence.
Qed.

Lemma synthesize_true : forall m src dst,
  fst (synthesize m src dst) = true ->
  exists r, validate m src dst (snd (synthesize m src dst)) = Some r.
Proof.
  intros m src dst. unfold synthesize.
  destruct (pick m src dst (candidates m src dst)) eqn:E; simpl; [|discriminate].
  intros _. eapply pick_some; eauto.
Qed.

(** * The naive plan is always accepted *)

Lemma naive_gathers : forall m l P,
  chain m (P ++ l)
    (flat_map (fun dD => match axes (snd dD) with [] => [] | xs => [AllGather (fst dD) xs] end)
              (combine (seq (length P) (length l)) l))
    (P ++ map (fun D => mkdim [] (gsize D)) l).
Proof.
  intros m l. induction l as [|D l IH]; intros P; simpl; [constructor|].
  replace (P ++ mkdim [] (gsize D) :: map (fun D => mkdim [] (gsize D)) l)
    with ((P ++ [mkdim [] (gsize D)]) ++ map (fun D => mkdim [] (gsize D)) l)
    by (rewrite <- app_assoc; reflexivity).
  assert (HS : S (length P) = length (P ++ [mkdim [] (gsize D)])) by (rewrite app_length; simpl; lia).
  destruct D as [xs g]; simpl.
  destruct xs as [|x xs'].
  - simpl. rewrite HS. replace (P ++ mkdim [] g :: l) with ((P ++ [mkdim [] g]) ++ l)
      by (rewrite <- app_assoc; reflexivity). apply IH.
  - econstructor.
    + apply (step_gather m (P ++ mkdim (x :: xs') g :: l) (length P) (x :: xs') [] g).
      * apply nth_error_app_len.
      * discriminate.
    + rewrite set_nth_app_mid. rewrite HS.
      replace (P ++ mkdim [] g :: l) with ((P ++ [mkdim [] g]) ++ l)
        by (rewrite <- app_assoc; reflexivity). apply IH.
Qed.

Lemma used_empty_dims : forall l, used (map (fun D => mkdim [] (gsize D)) l) = [].
Proof. induction l; simpl; auto. Qed.

Lemma naive_slices : forall m l P,
  wf_mesh m -> Forall (wf_dim m) l -> NoDup (used (P ++ l)) ->
  chain m (P ++ map (fun D => mkdim [] (gsize D)) l)
    (flat_map (fun dD => match axes (snd dD) with [] => [] | xs => [DynSlice (fst dD) xs] end)
              (combine (seq (length P) (length l)) l))
    (P ++ l).
Proof.
  intros m l. induction l as [|D l IH]; intros P Hm Hwf Hnd; simpl; [rewrite app_nil_r; constructor|].
  inversion Hwf as [|? ? HD Hl]; subst.
  assert (HS : S (length P) = length (P ++ [D])) by (rewrite app_length; simpl; lia).
  assert (Hnd' : NoDup (used ((P ++ [D]) ++ l))) by (rewrite <- app_assoc; auto).
  destruct D as [xs g]; simpl.
  destruct xs as [|x xs'].
  - simpl. rewrite HS. replace (P ++ mkdim [] g :: map (fun D => mkdim [] (gsize D)) l)
      with ((P ++ [mkdim [] g]) ++ map (fun D => mkdim [] (gsize D)) l)
      by (rewrite <- app_assoc; reflexivity).
    replace (P ++ mkdim [] g :: l) with ((P ++ [mkdim [] g]) ++ l)
      by (rewrite <- app_assoc; reflexivity). apply IH; auto.
  - destruct HD as [Hg [Hax Hdiv]]. simpl in Hg, Hax, Hdiv.
    econstructor.
    + apply (step_slice m (P ++ mkdim [] g :: map (fun D => mkdim [] (gsize D)) l) (length P)
               (x :: xs') (mkdim [] g)).
      * apply nth_error_app_len.
      * discriminate.
      * auto.
      * rewrite used_app in Hnd. simpl in Hnd. apply nodup_app_r in Hnd.
        eapply nodup_app_l; eauto.
      * intros a Ha Hin. rewrite used_app in Hin. simpl in Hin. rewrite used_empty_dims in Hin.
        rewrite app_nil_r in Hin. rewrite used_app in Hnd. simpl in Hnd.
        apply (nodup_app_disj _ _ _ a Hnd Hin). change (In a ((x :: xs') ++ used l)).
        apply in_or_app; auto.
      * unfold lsize. cbn [axes gsize]. replace (nprod m []) with 1 by reflexivity. rewrite Nat.div_1_r. auto.
    + rewrite set_nth_app_mid. simpl. rewrite HS.
      replace (P ++ mkdim (x :: xs') g :: map (fun D => mkdim [] (gsize D)) l)
        with ((P ++ [mkdim (x :: xs') g]) ++ map (fun D => mkdim [] (gsize D)) l)
        by (rewrite <- app_assoc; reflexivity).
      replace (P ++ mkdim (x :: xs') g :: l) with ((P ++ [mkdim (x :: xs') g]) ++ l)
        by (rewrite <- app_assoc; reflexivity). apply IH; auto.
Qed.

Lemma map_empty_dims_eq : forall (l l' : atype), map gsize l = map gsize l' ->
  map (fun D => mkdim [] (gsize D)) l = map (fun D => mkdim [] (gsize D)) l'.
Proof.
  induction l; destruct l'; simpl; intros H; try discriminate; auto.
  inversion H. f_equal; auto.
Qed.

Lemma naive_chain : forall m src dst, valid_problem m src dst -> chain m src (naive m src dst) dst.
Proof.
  intros m src dst [Hs [Hd Hg]]. unfold naive. eapply chain_app.
  - apply (naive_gathers m src []).
  - simpl. rewrite (map_empty_dims_eq src dst Hg).
    destruct Hd as [Hm [Hwf Hnd]].
    apply (naive_slices m dst []); auto.
Qed.

(** * Theorem 1: the synthesizer is total *)

Theorem synthesize_correct : forall m src dst, valid_problem m src dst ->
  exists r, check m src dst (snd (synthesize m src dst)) = Ok r.
Proof.
  intros m src dst Hv. destruct (fst (synthesize m src dst)) eqn:E.
  - destruct (synthesize_true m src dst E) as [r Hr].
    apply validate_spec in Hr. exists r. tauto.
  - unfold synthesize in *. destruct (pick m src dst (candidates m src dst)); [discriminate|].
    simpl. apply check_accepts_iff_chain. split; auto. apply naive_chain; auto.
Qed.

(** * Theorem 2: memory *)

Theorem synthesize_memory : forall m src dst,
  fst (synthesize m src dst) = true ->
  exists r, check m src dst (snd (synthesize m src dst)) = Ok r /\
    peak r <= Nat.max (size m src) (size m dst) /\
    Forall (fun t => size m t <= Nat.max (size m src) (size m dst)) (types r).
Proof.
  intros m src dst H. destruct (synthesize_true m src dst H) as [r Hr].
  apply validate_spec in Hr. destruct Hr as [Hc [Hp _]]. exists r. split; auto. split; auto.
  apply check_ok_iff in Hc. destruct Hc as [_ [_ [_ Hpk]]].
  apply Forall_forall. intros t Ht. pose proof (peak_of_ge m (types r) t Ht).
  unfold bound in Hp. lia.
Qed.

(** * Theorem 3: normal form, and which axes slices and gathers touch *)

Theorem synthesize_normal_form : forall m src dst,
  fst (synthesize m src dst) = true ->
  normal_form (snd (synthesize m src dst)) /\
  Forall (axes_ok_prop dst) (snd (synthesize m src dst)).
Proof.
  intros m src dst H. destruct (synthesize_true m src dst H) as [r Hr].
  apply validate_spec in Hr. destruct Hr as [_ [_ [Hn Ha]]]. split.
  - apply nf_slices_spec; auto.
  - apply Forall_forall. intros c Hc. apply axes_ok_spec. rewrite forallb_forall in Ha. auto.
Qed.

(** * Theorem 4: traffic of the gathers *)

Theorem synthesize_gather_traffic : forall m src dst,
  fst (synthesize m src dst) = true ->
  exists r p12 p3, check m src dst (snd (synthesize m src dst)) = Ok r /\
    snd (synthesize m src dst) = p12 ++ p3 /\
    Forall (fun c => is_gather c = false) p12 /\
    Forall (fun c => is_gather c = true) p3 /\
    chain m src p12 (nth (length p12) (types r) src) /\
    fold_right plus 0 (skipn (length p12) (received r)) =
      size m dst - size m (nth (length p12) (types r) src).
Proof.
  intros m src dst H. destruct (synthesize_true m src dst H) as [r Hr].
  apply validate_spec in Hr. destruct Hr as [Hc [_ [Hn _]]].
  destruct (nf_slices_spec _ Hn) as [p1 [p2 [p3 [Ep [H1 [H2 H3]]]]]].
  exists r, (p1 ++ p2), p3. rewrite Ep in *. rewrite <- app_assoc. split; auto. split; auto.
  split.
  { apply Forall_app. split; eapply Forall_impl; try eassumption; intros c Hc';
      destruct c; simpl in *; congruence. }
  split; auto.
  apply check_ok_iff in Hc. destruct Hc as [[Hs _] [Ht [Hlast _]]].
  rewrite app_assoc in Ht. destruct (trace_split m (p1 ++ p2) p3 src _ _ Ht) as [Hsuf Hpre].
  split; auto.
  assert (Hw : wf m (nth (length (p1 ++ p2)) (types r) src)).
  { pose proof (trace_wf_all _ _ _ _ _ Ht Hs) as HF. rewrite Forall_forall in HF. apply HF.
    apply nth_In. destruct (trace_length _ _ _ _ _ Ht) as [Hl _]. rewrite Hl, !app_length. lia. }
  pose proof (gathers_traffic _ _ _ _ _ Hsuf Hw H3) as E.
  destruct (trace_length _ _ _ _ _ Ht) as [Hl _].
  assert (Hne : skipn (length (p1 ++ p2)) (types r) <> []).
  { intro Hx. apply (f_equal (@length _)) in Hx. rewrite skipn_length in Hx. simpl in Hx.
    rewrite Hl, !app_length in Hx. lia. }
  assert (Hlast' : last (skipn (length (p1 ++ p2)) (types r)) (nth (length (p1 ++ p2)) (types r) src) = dst).
  { rewrite <- Hlast. rewrite (last_indep _ _ _ src) by auto.
    apply last_skipn. rewrite Hl, !app_length. lia. }
  rewrite Hlast' in E. lia.
Qed.
