(** The guarantees of the uneven planning call [Upipeline.uplan_problem]:
    [ufallback_ok] (the fallback always validates), [uplan_spec] (for every
    valid uneven problem the returned plan is accepted by the uneven
    checker over a split of the user's mesh, and moves every global array
    correctly whatever the padding value), [ucheck_of_check] and
    [uplan_even] (on even problems the call returns [Pipeline.plan_problem]'s
    split and plan, so [Pipelineproof.plan_spec] holds of it). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Permute Refine Pipeline Pipelineproof Ppipelineproof
  Uneven Unevenproof Uchecker Ucheckerproof Upipeline.
Import ListNotations.

(** * Refinement of uneven types *)

Lemma urefine_wf : forall m fs t, splits m fs -> wf_uneven m t -> wf_uneven (rmesh fs) (rtype fs t).
Proof.
  intros m fs t Hs Ht. pose proof Ht as [Hm [HF Hnd]]. split; [apply (wf_rmesh m fs); auto|split].
  - apply Forall_forall. intros D' HD'. unfold rtype in HD'. apply in_map_iff in HD' as [D [<- HD]].
    rewrite Forall_forall in HF. destruct (HF D HD) as [Hg HA].
    unfold wf_uneven_dim, rdim; simpl. split; auto.
    intros x Hx. apply in_flat_map in Hx as [a [Ha Hxa]]. apply (grp_lt m fs a); auto.
  - rewrite used_rtype. apply (nodup_flat_grp m); auto. intros a Ha.
    unfold used in Ha. apply in_flat_map in Ha as [D [HD Ha]]. rewrite Forall_forall in HF.
    apply (proj2 (HF D HD)); auto.
Qed.

Lemma uvalid_refine : forall m fs src dst, splits m fs -> uvalid_problem m src dst ->
  uvalid_problem (rmesh fs) (rtype fs src) (rtype fs dst).
Proof.
  intros m fs src dst Hs [H1 [H2 H3]]. split; [|split]; try (apply (urefine_wf m); auto).
  rewrite !refine_gsizes. exact H3.
Qed.

Lemma urefine_ugidx : forall m fs D r k, splits m fs -> wf_mesh m -> r < ndevices m ->
  (forall a, In a (axes D) -> a < length m) ->
  ugidx (rmesh fs) (rdim fs D) (coords_of_rank (rmesh fs) r) k = ugidx m D (coords_of_rank m r) k.
Proof.
  intros m fs D r k Hs Hm Hr HA. unfold ugidx, ucsize, block, rdim. cbn [axes gsize].
  rewrite (refine_mr m), (nprod_flat_grp m); auto.
Qed.

Lemma urefine_uvlen : forall m fs D r, splits m fs -> wf_mesh m -> r < ndevices m ->
  (forall a, In a (axes D) -> a < length m) ->
  uvlen (rmesh fs) (rdim fs D) (coords_of_rank (rmesh fs) r) = uvlen m D (coords_of_rank m r).
Proof.
  intros m fs D r Hs Hm Hr HA. unfold uvlen, block, rdim. cbn [axes gsize].
  rewrite (refine_mr m), (nprod_flat_grp m); auto.
Qed.

Lemma uaxes_range : forall m t, wf_uneven m t -> forall D, In D t -> forall a, In a (axes D) -> a < length m.
Proof. intros m t [_ [HF _]] D HD. rewrite Forall_forall in HF. apply (HF D HD). Qed.

(** The device of rank [r] holds the same global indices, with the same
    valid positions, on the refined mesh. *)
Theorem urefine_ugindex : forall m fs t r i, splits m fs -> wf_uneven m t -> r < ndevices m ->
  ugindex (rmesh fs) (rtype fs t) (coords_of_rank (rmesh fs) r) i = ugindex m t (coords_of_rank m r) i.
Proof.
  intros m fs t r i Hs Ht Hr. unfold ugindex, rtype. revert i.
  pose proof (uaxes_range m t Ht) as HA.
  assert (Hm : wf_mesh m) by apply Ht. clear Ht. induction t as [|D t IH]; intros [|k i]; simpl; auto.
  rewrite (urefine_ugidx m) by (auto; apply (HA D); simpl; auto). f_equal.
  apply IH. intros D' HD'; apply HA; simpl; auto.
Qed.

Theorem urefine_uvalid_pos : forall m fs t r i, splits m fs -> wf_uneven m t -> r < ndevices m ->
  (uvalid_pos (rmesh fs) (rtype fs t) (coords_of_rank (rmesh fs) r) i <-> uvalid_pos m t (coords_of_rank m r) i).
Proof.
  intros m fs t r i Hs Ht Hr. unfold uvalid_pos, rtype. revert i.
  pose proof (uaxes_range m t Ht) as HA.
  assert (Hm : wf_mesh m) by apply Ht. clear Ht. induction t as [|D t IH]; intros i.
  - simpl. split; intros H; inversion H; constructor.
  - destruct i as [|k i]; [split; intros H; inversion H|].
    assert (HA' : forall D', In D' t -> forall a, In a (axes D') -> a < length m) by (intros; apply HA with D'; simpl; auto).
    assert (E : uvlen (rmesh fs) (rdim fs D) (coords_of_rank (rmesh fs) r) = uvlen m D (coords_of_rank m r))
      by (apply (urefine_uvlen m); auto; apply HA; simpl; auto).
    cbn [map]. split; intros H; inversion H as [|? ? ? ? Hk Hrest]; subst; constructor.
    + rewrite <- E. exact Hk.
    + apply (IH HA'). exact Hrest.
    + rewrite E. exact Hk.
    + apply (IH HA'). exact Hrest.
Qed.

Lemma urefine_ulocal : forall V (A : list nat -> V) pad m fs t r i, splits m fs -> wf_uneven m t -> r < ndevices m ->
  ulocal A pad (rmesh fs) (rtype fs t) (coords_of_rank (rmesh fs) r) i = ulocal A pad m t (coords_of_rank m r) i.
Proof.
  intros V A pad m fs t r i Hs Ht Hr. unfold ulocal.
  rewrite (urefine_ugindex m) by auto.
  destruct (uvalid_posb m t (coords_of_rank m r) i) eqn:E.
  - apply uvalid_posb_spec in E. apply (urefine_uvalid_pos m fs) in E; auto.
    apply uvalid_posb_spec in E. rewrite E. reflexivity.
  - destruct (uvalid_posb (rmesh fs) (rtype fs t) (coords_of_rank (rmesh fs) r) i) eqn:E'; [|reflexivity].
    apply uvalid_posb_spec in E'. apply (urefine_uvalid_pos m fs) in E'; auto.
    apply uvalid_posb_spec in E'. congruence.
Qed.

(** * The fallback *)

Definition repl (D : dim) : dim := mkdim [] (gsize D).

Lemma utrace_app : forall m t p ts rs, utrace m t p ts rs ->
  forall q ts' rs', utrace m (last ts t) q ts' rs' -> utrace m t (p ++ q) (removelast ts ++ ts') (rs ++ rs').
Proof.
  intros m t p ts rs H. induction H as [t|t op t1 p ts rs Hs Ht IH]; intros q ts' rs' H'.
  - exact H'.
  - pose proof (utrace_nonempty _ _ _ _ _ Ht) as Hne.
    replace (removelast (t :: ts) ++ ts') with (t :: (removelast ts ++ ts')).
    + cbn [app]. constructor; auto. apply IH.
      rewrite last_cons_ne in H' by exact Hne. rewrite (last_indep _ ts t1 t) by exact Hne. exact H'.
    + destruct ts as [|x ts]; [congruence|]. reflexivity.
Qed.

Lemma ucsize_nil : forall m g, ucsize m (mkdim [] g) = g.
Proof. intros. unfold ucsize. cbn [axes gsize nprod map prod fold_right]. apply csize_one. Qed.

Lemma ugather_step : forall m L A g t, A <> [] ->
  ucstep m (L ++ mkdim A g :: t) (AllGather (length L) A) (L ++ mkdim [] g :: t).
Proof.
  intros m L A g t HA. apply ucstep_coll.
  replace (L ++ mkdim [] g :: t) with (set_nth (L ++ mkdim A g :: t) (length L) (mkdim [] g))
    by apply set_nth_app_mid.
  apply (ustep_gather m _ (length L) A [] g); auto.
  - apply nth_error_app_len.
  - right. rewrite ucsize_nil. lia.
Qed.

Lemma map_repl_app1 : forall L D t, map repl L ++ repl D :: t = map repl (L ++ [D]) ++ t.
Proof. intros. rewrite map_app, <- app_assoc. reflexivity. Qed.

Lemma gathers_trace : forall m t L, exists ts rs,
  utrace m (map repl L ++ t) (gathers t (length L)) ts rs /\ last ts (map repl L ++ t) = map repl (L ++ t).
Proof.
  intros m t. induction t as [|D t IH]; intros L.
  - exists [map repl L ++ []], []. split; [constructor|]. cbn [last]. rewrite !app_nil_r. reflexivity.
  - destruct D as [A g]. cbn [gathers axes].
    destruct (IH (L ++ [mkdim A g])) as [ts [rs [Htr Hl]]].
    rewrite app_length in Htr. cbn [length] in Htr. replace (length L + 1) with (S (length L)) in Htr by lia.
    rewrite <- app_assoc in Hl. cbn [app] in Hl.
    rewrite map_app, <- app_assoc in Htr, Hl. cbn [map app repl gsize] in Htr, Hl.
    destruct A as [|a A'].
    + exists ts, rs. split; auto.
    + exists ((map repl L ++ mkdim (a :: A') g :: t) :: ts).
      exists (urecv m (map repl L ++ mkdim (a :: A') g :: t) (AllGather (length L) (a :: A'))
                (map repl L ++ mkdim [] g :: t) :: rs).
      pose proof (utrace_nonempty _ _ _ _ _ Htr) as Hne.
      split.
      * constructor; auto. pose proof (ugather_step m (map repl L) (a :: A') g t ltac:(discriminate)) as Hs.
        rewrite map_length in Hs. exact Hs.
      * rewrite last_cons_ne by exact Hne. rewrite (last_indep _ ts _ (map repl L ++ mkdim [] g :: t)) by exact Hne.
        exact Hl.
Qed.

Lemma used_map_repl : forall t, used (map repl t) = [].
Proof. induction t as [|D t IH]; [reflexivity|]. cbn [map]. rewrite used_cons, IH. reflexivity. Qed.

Lemma slices_trace : forall m t L, NoDup (used (L ++ t)) -> (forall a, In a (used t) -> a < length m) ->
  exists ts rs, utrace m (L ++ map repl t) (slices t (length L)) ts rs /\ last ts (L ++ map repl t) = L ++ t.
Proof.
  intros m t. induction t as [|D t IH]; intros L Hnd Hr.
  - exists [L ++ []], []. split; [constructor|]. cbn [last map]. reflexivity.
  - destruct D as [A g]. cbn [slices axes].
    assert (Hnd' : NoDup (used ((L ++ [mkdim A g]) ++ t))) by (rewrite <- app_assoc; exact Hnd).
    assert (Hr' : forall a, In a (used t) -> a < length m)
      by (intros a Ha; apply Hr; rewrite used_cons; apply in_or_app; auto).
    destruct (IH (L ++ [mkdim A g]) Hnd' Hr') as [ts [rs [Htr Hl]]].
    rewrite app_length in Htr. cbn [length] in Htr. replace (length L + 1) with (S (length L)) in Htr by lia.
    rewrite <- !app_assoc in Htr, Hl. cbn [app] in Htr, Hl.
    change (map repl (mkdim A g :: t)) with (mkdim [] g :: map repl t).
    try (rewrite <- app_assoc in Hl; cbn [app] in Hl).
    destruct A as [|a A'].
    + exists ts, rs. split; auto.
    + set (u := L ++ mkdim [] g :: map repl t).
      set (u1 := L ++ mkdim (a :: A') g :: map repl t).
      assert (Hs : ucstep m u (DynSlice (length L) (a :: A')) u1).
      { apply ucstep_coll. unfold u, u1.
        replace (L ++ mkdim (a :: A') g :: map repl t)
          with (set_nth (L ++ mkdim [] g :: map repl t) (length L) (mkdim (axes (mkdim [] g) ++ a :: A') (gsize (mkdim [] g))))
          by apply set_nth_app_mid.
        rewrite used_app, used_cons in Hnd. cbn [axes] in Hnd.
        apply ustep_slice.
        - apply nth_error_app_len.
        - discriminate.
        - intros b Hb. apply Hr. rewrite used_cons. apply in_or_app; auto.
        - apply nodup_app_r in Hnd. apply nodup_app_l in Hnd. exact Hnd.
        - intros b Hb Hu. rewrite used_app, used_cons, used_map_repl in Hu. cbn [axes app] in Hu.
          rewrite app_nil_r in Hu. apply (nodup_app_disj _ _ _ b Hnd Hu). apply in_or_app; auto.
        - right. rewrite ucsize_nil. cbn [gsize]. lia. }
      pose proof (utrace_nonempty _ _ _ _ _ Htr) as Hne.
      exists (u :: ts), (urecv m u (DynSlice (length L) (a :: A')) u1 :: rs). split.
      * constructor; auto.
      * rewrite last_cons_ne by exact Hne. rewrite (last_indep _ ts _ u1) by exact Hne. exact Hl.
Qed.

Lemma map_repl_gsize : forall s d, map gsize s = map gsize d -> map repl s = map repl d.
Proof.
  intros s. induction s as [|D s IH]; intros [|D' d] H; try discriminate; [reflexivity|].
  injection H as H1 H2. cbn [map]. unfold repl at 1 3. rewrite H1, (IH d H2). reflexivity.
Qed.

Lemma last_app_nonempty : forall A (l l' : list A) d, l' <> [] -> last (l ++ l') d = last l' d.
Proof.
  intros A l l' d H. induction l as [|x l IH]; [reflexivity|].
  cbn [app]. rewrite <- IH. destruct l as [|y l]; [destruct l' as [|z l']; [congruence|reflexivity]|reflexivity].
Qed.

(** Gathering every sharded dimension whole, then slicing every dimension
    into the target's axes, is accepted on every valid uneven problem (a
    gather to no axes and a slice from no axes always satisfy [split_ok]). *)
Lemma ufallback_accepts : forall m s d, uvalid_problem m s d -> exists r, ucheck m s d (ufallback_plan s d) = Ok r.
Proof.
  intros m s d Hv. pose proof Hv as [Hs [Hd Hg]].
  destruct (gathers_trace m s []) as [ts1 [rs1 [H1 L1]]]. cbn [map app length] in H1, L1.
  destruct (slices_trace m d []) as [ts2 [rs2 [H2 L2]]].
  { apply Hd. }
  { intros a Ha. unfold used in Ha. apply in_flat_map in Ha as [D [HD Ha]]. apply (uaxes_range m d Hd D); auto. }
  cbn [app length] in H2, L2.
  rewrite (map_repl_gsize s d Hg) in L1. rewrite <- L1 in H2.
  pose proof (utrace_app m s _ _ _ H1 _ _ _ H2) as H.
  exists (mkureport (removelast ts1 ++ ts2) (upeak_of m (removelast ts1 ++ ts2)) (rs1 ++ rs2)).
  apply ucheck_ok. cbn [utypes ureceived upeak]. split; [exact Hv|]. split; [exact H|]. split; [|reflexivity].
  pose proof (utrace_nonempty _ _ _ _ _ H2) as Hne.
  rewrite last_app_nonempty by exact Hne. rewrite (last_indep _ ts2 s (map repl d)) by exact Hne. exact L2.
Qed.

(** The pipeline's fallback validates over the prime refinement. *)
Theorem ufallback_ok : forall m src dst, uvalid_problem m src dst ->
  exists r, ufallback m src dst = Ok (prime_split m, ufallback_plan (rtype (prime_split m) src) (rtype (prime_split m) dst), r) /\
    ucheck (rmesh (prime_split m)) (rtype (prime_split m) src) (rtype (prime_split m) dst)
      (ufallback_plan (rtype (prime_split m) src) (rtype (prime_split m) dst)) = Ok r.
Proof.
  intros m src dst Hv.
  destruct (ufallback_accepts _ _ _ (uvalid_refine m (prime_split m) src dst (prime_split_splits m) Hv)) as [r Hr].
  exists r. split; auto. unfold ufallback. rewrite Hr. reflexivity.
Qed.

(** * The pipeline *)

Lemma ucandidate_ok : forall src dst fs p x, ucandidate src dst fs p = Some x ->
  exists r, x = (fs, p, r) /\ ucheck (rmesh fs) (rtype fs src) (rtype fs dst) p = Ok r.
Proof.
  intros src dst fs p x H. unfold ucandidate in H.
  destruct (ucheck _ _ _ p) as [r|e] eqn:Hc; [|discriminate]. inversion H; subst. eauto.
Qed.

Lemma upick_in : forall a b x, upick a b = Some x -> a = Some x \/ b = Some x.
Proof.
  intros [a|] [b|] x H; cbn [upick] in H; auto.
  destruct (upeak (snd b) <? upeak (snd a)); auto.
Qed.

Definition accepted (m : mesh) (src dst : atype) (x : split * plan * ureport) : Prop :=
  match x with (fs, p, r) => splits m fs /\ ucheck (rmesh fs) (rtype fs src) (rtype fs dst) p = Ok r end.

Lemma uneven_plan_validated : forall m src dst, uvalid_problem m src dst ->
  exists x, uneven_plan m src dst = Ok x /\ accepted m src dst x.
Proof.
  intros m src dst Hv.
  destruct (ufallback_ok m src dst Hv) as [rf [Hf Hcf]].
  unfold uneven_plan.
  set (sur := match plan_problem m (surrogate m src) (surrogate m dst) with
              | Ok (fs, p, _) => ucandidate src dst fs (real_plan (map gsize src) p)
              | Err _ => None end).
  assert (Hsur : forall x, sur = Some x -> accepted m src dst x).
  { intros x Hx. unfold sur in Hx.
    destruct (plan_problem m _ _) as [[[fs p] r0]|e] eqn:Hp; [|discriminate].
    destruct (ucandidate_ok _ _ _ _ _ Hx) as [r [-> Hc]]. split; [eapply plan_problem_splits; eauto|exact Hc]. }
  match goal with |- context [upick sur ?S] => set (srch := S) end.
  assert (Hsr : forall x, srch = Some x -> accepted m src dst x).
  { intros x Hx. unfold srch in Hx. destruct (match sur with Some x => _ | None => false end); [discriminate|].
    destruct (usearch _ _ _ _ _) as [p|]; [|discriminate].
    destruct (ucandidate_ok _ _ _ _ _ Hx) as [r [-> Hc]]. split; [apply prime_split_splits|exact Hc]. }
  destruct (upick sur srch) as [x|] eqn:Hpk.
  - exists x. split; [reflexivity|]. destruct (upick_in _ _ _ Hpk); auto.
  - eexists. split; [exact Hf|]. split; [apply prime_split_splits|exact Hcf].
Qed.

Lemma uplan_validated : forall m src dst, uvalid_problem m src dst ->
  exists fs p r, uplan_problem m src dst = Ok (fs, p, r) /\ splits m fs /\
    ucheck (rmesh fs) (rtype fs src) (rtype fs dst) p = Ok r.
Proof.
  intros m src dst Hv.
  destruct (ufallback_ok m src dst Hv) as [rf [Hf Hcf]].
  assert (Fb : exists fs p r, ufallback m src dst = Ok (fs, p, r) /\ splits m fs /\
                 ucheck (rmesh fs) (rtype fs src) (rtype fs dst) p = Ok r).
  { do 3 eexists. split; [exact Hf|]. split; [apply prime_split_splits|exact Hcf]. }
  unfold uplan_problem. rewrite (uproblem_error_none m src dst Hv).
  destruct (is_even m src dst).
  - destruct (plan_problem m src dst) as [[[fs p] r0]|e] eqn:Hp; [|exact Fb].
    destruct (ucheck (rmesh fs) (rtype fs src) (rtype fs dst) p) as [r|e] eqn:Hc; [|exact Fb].
    do 3 eexists. split; [reflexivity|]. split; [eapply plan_problem_splits; eauto|exact Hc].
  - destruct (uneven_plan_validated m src dst Hv) as [[[fs p] r] [H1 [H2 H3]]].
    exists fs, p, r. auto.
Qed.

(** **End to end for uneven types**: for every valid uneven problem,
    [uplan_problem] returns a split of the user's mesh (same devices, every
    rank holding the same padded source buffer as on the user's mesh) and a
    plan the uneven checker accepts over it; running it on the padded
    distribution of any global array, with any padding value, leaves every
    valid position of every rank's target buffer the array's element at the
    global index the user's target type gives (the chunked convention:
    [Ucheckerproof.ucheck_correct_chunked]). The checker's report gives the
    peak padded buffer; no bound on it is claimed. *)
Theorem uplan_spec : forall m src dst, uvalid_problem m src dst ->
  exists fs p r, uplan_problem m src dst = Ok (fs, p, r) /\
    splits m fs /\ ndevices (rmesh fs) = ndevices m /\
    ucheck (rmesh fs) (rtype fs src) (rtype fs dst) p = Ok r /\
    (forall V (A : list nat -> V) pad n i, n < ndevices m ->
       ulocal A pad (rmesh fs) (rtype fs src) (coords_of_rank (rmesh fs) n) i = ulocal A pad m src (coords_of_rank m n) i) /\
    (forall V (A : list nat -> V) pad n i, n < ndevices m -> uvalid_pos m dst (coords_of_rank m n) i ->
       uexec pad (rmesh fs) (rtype fs src) p (ulocal A pad (rmesh fs) (rtype fs src)) (coords_of_rank (rmesh fs) n) i
       = A (ugindex m dst (coords_of_rank m n) i)).
Proof.
  intros m src dst Hv. pose proof Hv as [Hs [Hd _]].
  destruct (uplan_validated m src dst Hv) as [fs [p [r [H1 [H2 H3]]]]].
  exists fs, p, r. split; [exact H1|]. split; [exact H2|].
  assert (Hn : ndevices (rmesh fs) = ndevices m) by (apply ndevices_rmesh; auto).
  split; [exact Hn|]. split; [exact H3|]. split.
  - intros V A pad n i Hnl. apply (urefine_ulocal V A pad m fs src n i); auto.
  - intros V A pad n i Hnl Hi.
    assert (Hm' : wf_mesh (rmesh fs)) by (apply (wf_rmesh m fs); auto; apply Hs).
    rewrite (ucheck_correct _ _ _ _ _ H3 V A pad).
    + rewrite (urefine_ugindex m) by auto. reflexivity.
    + apply coords_of_rank_valid; auto.
    + apply (urefine_uvalid_pos m fs); auto.
Qed.

(** * Even problems *)

Lemma ucstep_of_step : forall m t c t', wf m t -> step m t c t' -> ucstep m t c t'.
Proof.
  intros m t c t' Ht Hs. destruct c as [d xs|d xs|d e xs|t1].
  1-3: apply ucstep_coll; apply ustep_of_step; auto; intros t'' E; discriminate.
  inversion Hs as [| | |t2 Hw Hg Hl]; subst.
  apply ucstep_permute; auto.
  - apply wf_uneven_of_wf; auto.
  - unfold dnprods. rewrite <- !(map_map axes (nprod m)). apply dims_nprod; auto; try apply Ht; apply Hw.
Qed.

Lemma usize_padded_even : forall m t, wf m t -> usize_padded m t = size m t.
Proof.
  intros m t Ht. rewrite <- (usize_padded_eq m t (fun _ => 0)). apply usize_even; auto.
  apply zero_valid, Ht.
Qed.

Lemma trace_utrace : forall m t p ts rs, trace m t p ts rs -> wf m t -> exists rs', utrace m t p ts rs'.
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros Hw.
  - exists []. constructor.
  - destruct IH as [rs' H']; [eapply step_wf; eauto|]. eexists. constructor; [|exact H'].
    apply ucstep_of_step; auto.
Qed.

Lemma upeak_of_even : forall m ts, Forall (wf m) ts -> upeak_of m ts = peak_of m ts.
Proof.
  intros m ts H. induction H as [|t ts Ht Hts IH]; [reflexivity|].
  cbn [upeak_of peak_of fold_right]. fold (upeak_of m ts) (peak_of m ts). rewrite IH, usize_padded_even; auto.
Qed.

(** On even types the uneven checker accepts every plan the checker
    accepts, with the same types and the same peak. *)
Theorem ucheck_of_check : forall m src dst p r, check m src dst p = Ok r ->
  exists ur, ucheck m src dst p = Ok ur /\ utypes ur = types r /\ upeak ur = peak r.
Proof.
  intros m src dst p r H. apply check_ok_iff in H as [[Hs [Hd Hg]] [Ht [Hl Hp]]].
  destruct (trace_utrace m src p _ _ Ht Hs) as [rs' Hu].
  exists (mkureport (types r) (upeak_of m (types r)) rs'). split; [|split; [reflexivity|]].
  - apply ucheck_ok. cbn [utypes upeak ureceived]. split; [|split; [exact Hu|split; [exact Hl|reflexivity]]].
    split; [apply wf_uneven_of_wf; auto|split; [apply wf_uneven_of_wf; auto|exact Hg]].
  - cbn [upeak]. rewrite Hp. apply upeak_of_even. eapply trace_wf_all; eauto.
Qed.

(** On even problems [uplan_problem] returns [plan_problem]'s split and
    plan (so [Pipelineproof.plan_spec] and [plan_traffic] hold of it), with
    the same types and peak. *)
Theorem uplan_even : forall m src dst fs p r, valid_problem m src dst -> plan_problem m src dst = Ok (fs, p, r) ->
  exists ur, uplan_problem m src dst = Ok (fs, p, ur) /\ utypes ur = types r /\ upeak ur = peak r.
Proof.
  intros m src dst fs p r Hv Hp.
  destruct (plan_spec m src dst Hv) as [fs' [p' [r' [Hp' [_ [_ [Hc _]]]]]]].
  rewrite Hp in Hp'. inversion Hp'; subst fs' p' r'.
  destruct (ucheck_of_check _ _ _ _ _ Hc) as [ur [Hu [E1 E2]]].
  exists ur. split; auto.
  pose proof Hv as [Hs [Hd Hg]].
  assert (Huv : uvalid_problem m src dst) by (split; [apply wf_uneven_of_wf; auto|split; [apply wf_uneven_of_wf; auto|exact Hg]]).
  assert (He : is_even m src dst = true) by (unfold is_even; apply andb_true_iff; split; apply wfb_spec; auto).
  unfold uplan_problem. rewrite (uproblem_error_none m src dst Huv), He. rewrite Hp, Hu. reflexivity.
Qed.
