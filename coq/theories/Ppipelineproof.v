(** The end-to-end guarantees of [Ppipeline.pplan_problem]: for every valid
    partial problem it returns a plan over a refinement of the user's mesh
    that the partial checker accepts, that takes every representation of
    every global array to one of the same array under the target, over any
    commutative monoid, and whose every type fits [max(size src, size dst)];
    with nothing pending it is [Pipeline.plan_problem]'s plan. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Validate Refine Pipeline Pipelineproof
  Semantics Monoid Partial Partialproof Pchecker Ppipeline.
Import ListNotations.

(** * Refined partial types *)

Lemma raxes_range : forall m fs xs, splits m fs -> (forall a, In a xs -> a < length m) ->
  forall x, In x (raxes fs xs) -> x < length (rmesh fs).
Proof.
  intros m fs xs Hs Hr x Hx. apply in_flat_map in Hx as [a [Ha Hxa]]. apply (grp_lt m fs a); auto.
Qed.

(** Refined axes of disjoint lists of axes are disjoint. *)
Lemma raxes_disjoint : forall m fs xs ys, splits m fs ->
  (forall a, In a xs -> a < length m) -> (forall a, In a ys -> a < length m) ->
  (forall a, In a xs -> ~ In a ys) -> forall x, In x (raxes fs xs) -> ~ In x (raxes fs ys).
Proof.
  intros m fs xs ys Hs Hx Hy Hd x Hxs Hys.
  apply in_flat_map in Hxs as [a [Ha Hxa]]. apply in_flat_map in Hys as [b [Hb Hxb]].
  apply (grp_disjoint m fs a b x); auto. intros <-. apply (Hd a); auto.
Qed.

Lemma rptype_pwf : forall m fs pt, splits m fs -> pwf m pt -> pwf (rmesh fs) (rptype fs pt).
Proof.
  intros m fs [P t] Hs [Ht [Hnd [Hr Hu]]]. cbn [paxes ptyp] in *. unfold rptype. cbn [paxes ptyp].
  assert (Hru : forall a, In a (used t) -> a < length m).
  { intros a Ha. unfold used in Ha. apply in_flat_map in Ha as [D [HD Ha]]. apply (wf_axes_range m t D); auto. }
  split; [apply (refine_wf m); auto|]. split; [apply (nodup_flat_grp m); auto|]. split.
  - apply (raxes_range m); auto.
  - intros x Hx. cbn [paxes ptyp] in *. rewrite used_rtype. apply (raxes_disjoint m fs P (used t)); auto.
Qed.

Lemma refine_pvalid : forall m fs src dst, splits m fs -> pvalid_problem m src dst ->
  pvalid_problem (rmesh fs) (rptype fs src) (rptype fs dst).
Proof.
  intros m fs src dst Hs [Hsrc [Hdst Hg]]. split; [|split]; try (apply (rptype_pwf m); auto).
  unfold rptype. cbn [ptyp]. rewrite !refine_gsizes. exact Hg.
Qed.

Lemma refine_pbound : forall m fs src dst, splits m fs -> pvalid_problem m src dst ->
  pbound (rmesh fs) (rptype fs src) (rptype fs dst) = pbound m src dst.
Proof.
  intros m fs src dst Hs [Hsrc [Hdst _]]. unfold pbound, rptype. cbn [ptyp].
  rewrite !(refine_size m); auto; [apply Hdst|apply Hsrc].
Qed.

(** * Segments of a plan *)

Lemma filter_none : forall (f : nat -> bool) l, (forall x, In x l -> f x = false) -> filter f l = [].
Proof.
  intros f l H. induction l as [|x l IH]; [reflexivity|]. cbn [filter].
  rewrite H by (left; auto). apply IH. intros; apply H; right; auto.
Qed.

Lemma remove_axes_self : forall xs, remove_axes xs xs = [].
Proof.
  intros xs. apply filter_none. intros x Hx. rewrite (proj2 (memb_spec x xs) Hx). reflexivity.
Qed.

Lemma Forall_removelast : forall A (F : A -> Prop) l, Forall F l -> Forall F (removelast l).
Proof.
  intros A F l H. induction H as [|x l Hx Hl IH]; [constructor|].
  destruct l as [|y l]; [constructor|]. cbn [removelast]. constructor; auto.
Qed.

(** Two traces one after the other, with what holds of every type. *)
Lemma two_segments : forall m (F : ptype -> Prop) pt p ts rs q ts' rs',
  ptrace m pt p ts rs -> ptrace m (last ts pt) q ts' rs' -> Forall F ts -> Forall F ts' ->
  ptrace m pt (p ++ q) (removelast ts ++ ts') (rs ++ rs') /\
  last (removelast ts ++ ts') pt = last ts' (last ts pt) /\ Forall F (removelast ts ++ ts').
Proof.
  intros m F pt p ts rs q ts' rs' Ht Ht' Hf Hf'. pose proof (ptrace_nonempty _ _ _ _ _ Ht') as Hne.
  split; [apply ptrace_app; auto|]. split.
  - rewrite last_app_ne by exact Hne. apply last_default, Hne.
  - apply Forall_app. split; auto. apply Forall_removelast, Hf.
Qed.

Lemma reduce_all_trace : forall m xs t, NoDup xs ->
  exists ts rs, ptrace m (mkptype xs t) (reduce_all xs) ts rs /\
    last ts (mkptype xs t) = mkptype [] t /\ Forall (fun pt => ptyp pt = t) ts.
Proof.
  intros m [|a xs] t Hnd.
  - exists [mkptype [] t], []. split; [constructor|]. split; [reflexivity|]. repeat constructor.
  - eexists _, _. split.
    + econstructor; [|constructor]. apply pstep_allreduce; auto; discriminate.
    + rewrite remove_axes_self. split; [reflexivity|]. repeat constructor.
Qed.

Lemma make_pending_trace : forall m xs t, (forall a, In a xs -> a < length m) -> NoDup xs ->
  (forall a, In a xs -> ~ In a (used t)) ->
  exists ts rs, ptrace m (mkptype [] t) (make_pending xs) ts rs /\
    last ts (mkptype [] t) = mkptype xs t /\ Forall (fun pt => ptyp pt = t) ts.
Proof.
  intros m [|a xs] t Hr Hnd Hu.
  - exists [mkptype [] t], []. split; [constructor|]. split; [reflexivity|]. repeat constructor.
  - eexists _, _. split.
    + econstructor; [|constructor]. apply pstep_topartial; auto; try discriminate.
    + split; [reflexivity|]. repeat constructor.
Qed.

Lemma plan_problem_splits : forall m src dst fs p r, plan_problem m src dst = Ok (fs, p, r) -> splits m fs.
Proof.
  intros m src dst fs p r H. destruct (problem_error m src dst) eqn:E.
  - unfold plan_problem in H. rewrite E in H. discriminate.
  - destruct (plan_problem_validated m src dst (problem_error_valid m src dst E)) as [fs' [p' [r' [H' [Hs _]]]]].
    rewrite H in H'. inversion H'. subst. exact Hs.
Qed.

(** [plan_problem]'s plan as a partial plan with nothing pending. *)
Lemma plain_segment : forall m s t fs p r, valid_problem m s t -> plan_problem m s t = Ok (fs, p, r) ->
  splits m fs /\
  ptrace (rmesh fs) (mkptype [] (rtype fs s)) (map PColl p) (map (mkptype []) (types r)) (received r) /\
  last (map (mkptype []) (types r)) (mkptype [] (rtype fs s)) = mkptype [] (rtype fs t) /\
  Forall (fun pt => size (rmesh fs) (ptyp pt) <= bound m s t) (map (mkptype []) (types r)).
Proof.
  intros m s t fs p r Hv Hpp.
  destruct (plan_spec m s t Hv) as [fs' [p' [r' [H' [Hs [_ [Hc [_ [_ [Hf _]]]]]]]]]].
  rewrite Hpp in H'. inversion H'. subst fs' p' r'.
  apply check_ok_iff in Hc as [_ [Ht [Hl _]]].
  split; auto. split; [apply trace_ptrace; auto|]. split.
  - rewrite last_map_f, Hl. reflexivity.
  - apply Forall_map. exact Hf.
Qed.

(** With nothing pending, [plan_problem]'s report is what the partial
    validator reports for its plan. *)
Lemma ppeak_of_plain : forall m ts, ppeak_of m (map (mkptype []) ts) = peak_of m ts.
Proof. intros m ts. induction ts as [|t ts IH]; simpl; auto. Qed.

Lemma plain_validated : forall m s t fs p r, valid_problem m s t -> plan_problem m s t = Ok (fs, p, r) ->
  pvalidate (rmesh fs) (rptype fs (mkptype [] s)) (rptype fs (mkptype [] t)) (map PColl p) = Some (plain_report r).
Proof.
  intros m s t fs p r Hv Hpp.
  assert (Hpv : pvalid_problem m (mkptype [] s) (mkptype [] t)).
  { destruct Hv as [Hs [Hd Hg]]. split; [|split]; auto;
      (split; [auto|split; [constructor|split; intros a []]]). }
  destruct (plain_segment m s t fs p r Hv Hpp) as [Hsp [Ht [Hl Hf]]].
  assert (Hb : pbound (rmesh fs) (rptype fs (mkptype [] s)) (rptype fs (mkptype [] t)) = bound m s t)
    by (rewrite (refine_pbound m); auto).
  assert (Hpk : peak r = peak_of (rmesh fs) (types r)).
  { destruct (plan_spec m s t Hv) as [fs' [p' [r' [H' [_ [_ [Hc _]]]]]]].
    rewrite Hpp in H'. inversion H'. subst fs' p' r'. apply check_ok_iff in Hc. apply Hc. }
  unfold plain_report. rewrite Hpk, <- ppeak_of_plain. apply pvalidate_complete; auto.
  - apply (refine_pvalid m); auto.
  - rewrite Hb. exact Hf.
Qed.

(** * The fallback *)

Lemma pfallback_ok : forall m src dst, pvalid_problem m src dst ->
  exists fs pp r, pfallback m src dst = Ok (fs, pp, r) /\ splits m fs /\
    pvalidate (rmesh fs) (rptype fs src) (rptype fs dst) pp = Some r.
Proof.
  intros m [P s] [Q t] Hv. pose proof Hv as [Hs [Hd Hg]]. cbn [paxes ptyp] in *.
  assert (Hvp : valid_problem m s t) by (split; [apply Hs|split; [apply Hd|exact Hg]]).
  destruct (plan_problem_validated m s t Hvp) as [fs [p [r [Hpp _]]]].
  destruct (plain_segment m s t fs p r Hvp Hpp) as [Hsp [Ht2 [Hl2 Hf2]]].
  pose proof (rptype_pwf m fs _ Hsp Hs) as Hrs. pose proof (rptype_pwf m fs _ Hsp Hd) as Hrd.
  destruct (reduce_all_trace (rmesh fs) (raxes fs P) (rtype fs s)) as [ts1 [rs1 [Ht1 [Hl1 Hf1]]]];
    [apply Hrs|].
  destruct (make_pending_trace (rmesh fs) (raxes fs Q) (rtype fs t)) as [ts3 [rs3 [Ht3 [Hl3 Hf3]]]];
    [apply Hrd|apply Hrd|apply Hrd|].
  set (F := fun pt => size (rmesh fs) (ptyp pt) <= pbound (rmesh fs) (rptype fs (mkptype P s)) (rptype fs (mkptype Q t))).
  assert (Hb : pbound (rmesh fs) (rptype fs (mkptype P s)) (rptype fs (mkptype Q t)) = bound m s t)
    by (rewrite (refine_pbound m); auto).
  assert (HsS : size (rmesh fs) (rtype fs s) = size m s) by (apply (refine_size m); auto; apply Hs).
  assert (HsT : size (rmesh fs) (rtype fs t) = size m t) by (apply (refine_size m); auto; apply Hd).
  assert (HF1 : Forall F ts1).
  { eapply Forall_impl; [|exact Hf1]. intros pt E. unfold F. rewrite Hb, E, HsS. unfold bound. lia. }
  assert (HF2 : Forall F (map (mkptype []) (types r))).
  { eapply Forall_impl; [|exact Hf2]. intros pt E. unfold F. rewrite Hb. exact E. }
  assert (HF3 : Forall F ts3).
  { eapply Forall_impl; [|exact Hf3]. intros pt E. unfold F. rewrite Hb, E, HsT. unfold bound. lia. }
  rewrite <- Hl2 in Ht3.
  destruct (two_segments _ F _ _ _ _ _ _ _ Ht2 Ht3 HF2 HF3) as [Ht23 [Hl23 HF23]].
  rewrite Hl2, Hl3 in Hl23. rewrite <- Hl1 in Ht23, Hl23.
  destruct (two_segments _ F _ _ _ _ _ _ _ Ht1 Ht23 HF1 HF23) as [Ht [Hl HF]].
  rewrite Hl23 in Hl.
  unfold pfallback. cbn [ptyp paxes]. rewrite Hpp.
  pose proof (pvalidate_complete (rmesh fs) (rptype fs (mkptype P s)) (rptype fs (mkptype Q t)) _ _ _
             (refine_pvalid m fs _ _ Hsp Hv) Ht Hl HF) as Hval.
  rewrite Hval. eexists _, _, _. split; [reflexivity|]. split; [exact Hsp|exact Hval].
Qed.

(** * The pipeline *)

Lemma pplan_pending_validated : forall m src dst, pvalid_problem m src dst ->
  exists fs pp r, pplan_pending m src dst = Ok (fs, pp, r) /\ splits m fs /\
    pvalidate (rmesh fs) (rptype fs src) (rptype fs dst) pp = Some r.
Proof.
  intros m src dst Hv. unfold pplan_pending.
  destruct (scatter m (ptyp dst) (remove_axes (paxes dst) (paxes src)) (ptyp src)) as [[scat rest] u].
  destruct (plan_problem m u (ptyp dst)) as [[[fs p] r0]|e] eqn:Hpp; [|apply pfallback_ok; auto].
  match goal with |- context [pvalidate ?a ?b ?c ?d] => destruct (pvalidate a b c d) as [r|] eqn:Hval end;
    [|apply pfallback_ok; auto].
  eexists _, _, _. split; [reflexivity|]. split; [apply (plan_problem_splits m u (ptyp dst) fs p r0 Hpp)|exact Hval].
Qed.

Lemma pplan_validated : forall m src dst, pvalid_problem m src dst ->
  exists fs pp r, pplan_problem m src dst = Ok (fs, pp, r) /\ splits m fs /\
    pvalidate (rmesh fs) (rptype fs src) (rptype fs dst) pp = Some r.
Proof.
  intros m src dst Hv. unfold pplan_problem. rewrite (pproblem_error_none m src dst Hv).
  destruct src as [P s], dst as [Q t]. cbn [paxes ptyp].
  destruct P as [|a P]; [destruct Q as [|b Q]|]; try (apply pplan_pending_validated; exact Hv).
  assert (Hvp : valid_problem m s t) by (destruct Hv as [[Hs _] [[Hd _] Hg]]; split; auto).
  destruct (plan_problem_validated m s t Hvp) as [fs [p [r [Hpp [Hsp _]]]]].
  rewrite <- (plan_problem_valid m s t Hvp), Hpp. exists fs, (map PColl p), (plain_report r).
  split; [reflexivity|]. split; [exact Hsp|]. apply (plain_validated m); auto.
Qed.

(** The end-to-end theorem for partial types. For every valid problem,
    [pplan_problem] returns a split [fs] of the user's mesh (same devices),
    a partial plan [pp] and a report [r] such that: the partial checker
    accepts [pp] over the refined mesh with report [r]; executing [pp] by
    the data semantics takes any local arrays that represent a global array
    [A] under the (refined) source, over any commutative monoid, to local
    arrays that represent [A] under the target; and every type along the
    plan, hence the peak, is at most [max(size src, size dst)]. *)
Theorem pplan_spec : forall m src dst, pvalid_problem m src dst ->
  exists fs pp r, pplan_problem m src dst = Ok (fs, pp, r) /\
    splits m fs /\ ndevices (rmesh fs) = ndevices m /\
    pcheck (rmesh fs) (rptype fs src) (rptype fs dst) pp = Ok r /\
    (forall M A (x : coords -> list nat -> carrier M),
       represents M (rmesh fs) (rptype fs src) A x ->
       represents M (rmesh fs) (rptype fs dst) A (pexec M (rmesh fs) (rptype fs src) pp x)) /\
    Forall (fun pt => size (rmesh fs) (ptyp pt) <= pbound m src dst) (ptypes r) /\
    ppeak r <= pbound m src dst.
Proof.
  intros m src dst Hv. destruct (pplan_validated m src dst Hv) as [fs [pp [r [H [Hs Hval]]]]].
  apply pvalidate_spec in Hval as [Hc [Hpk Hf]]. rewrite (refine_pbound m) in Hpk, Hf by auto.
  exists fs, pp, r. split; [exact H|]. split; [exact Hs|]. split; [apply (ndevices_rmesh m); auto|].
  split; [exact Hc|]. split; [|auto]. intros M A x Hx. eapply pcheck_correct; eauto.
Qed.

(** With nothing pending, the partial pipeline returns [plan_problem]'s own
    plan, so [Pipelineproof.plan_spec] (exact blocks, normal form) and the
    traffic theorems apply to it as they are. *)
Theorem pplan_plain : forall m s t fs p r, valid_problem m s t -> plan_problem m s t = Ok (fs, p, r) ->
  exists r', pplan_problem m (mkptype [] s) (mkptype [] t) = Ok (fs, map PColl p, r').
Proof.
  intros m s t fs p r Hv Hpp.
  assert (Hpv : pvalid_problem m (mkptype [] s) (mkptype [] t)).
  { destruct Hv as [Hs [Hd Hg]]. split; [|split]; auto;
      (split; [auto|split; [constructor|split; intros a []]]). }
  unfold pplan_problem. rewrite (pproblem_error_none _ _ _ Hpv). cbn [paxes ptyp].
  rewrite <- (plan_problem_valid m s t Hv), Hpp. eexists; reflexivity.
Qed.

(** * On the user's mesh *)

(** [pplan_spec] is stated over the refined mesh. The runtime holds one
    buffer per rank, and the refined mesh has the user's ranks; what follows
    links the two: the refined group of a rank over the sub-axes of the
    pending axes [P] is, member by member, the user's group of that rank
    over [P], so the sums a representation is about are the same. *)

Lemma refine_in_range_back : forall m fs t i, splits m fs -> wf m t ->
  in_range (rmesh fs) (rtype fs t) i -> in_range m t i.
Proof.
  intros m fs t i Hs Ht Hi. apply in_range_iff in Hi as [Hl Hk]. apply in_range_iff.
  unfold rtype in Hl, Hk. rewrite map_length in Hl, Hk. split; auto. intros j Hj.
  specialize (Hk j Hj).
  rewrite (nth_indep _ dflt (rdim fs dflt)) in Hk by (rewrite map_length; auto). rewrite map_nth in Hk.
  rewrite (refine_lsize m) in Hk; auto. intros a Ha. apply (wf_axes_range m t (nth j t dflt)); auto.
  apply nth_In; auto.
Qed.

Lemma coords_of_rank_out : forall m r a, length m <= a -> coords_of_rank m r a = 0.
Proof.
  intros m r a Ha. unfold coords_of_rank. rewrite set_digits_other; auto.
  unfold all_axes. rewrite in_seq. lia.
Qed.

(** The rank of a device depends on its coordinates on the mesh's axes only. *)
Lemma rank_pt : forall m c c', (forall a, a < length m -> c a = c' a) -> rank m c = rank m c'.
Proof. intros m c c' H. unfold rank. apply mr_ext. intros a Ha. unfold all_axes in Ha. apply in_seq in Ha. apply H. lia. Qed.

(** Member [k] of the group over the sub-axes of [P] of rank [n] on the
    refined mesh is member [k] of the group over [P] of rank [n] on [m]. *)
Lemma refine_group_rank : forall m fs P n k, splits m fs -> wf_mesh m -> NoDup P ->
  (forall a, In a P -> a < length m) -> n < ndevices m -> k < nprod m P ->
  rank (rmesh fs) (set_digits (rmesh fs) (raxes fs P) (coords_of_rank (rmesh fs) n) k)
  = rank m (set_digits m P (coords_of_rank m n) k).
Proof.
  intros m fs P n k Hs Hm Hnd HP Hn Hk.
  assert (Hm' : wf_mesh (rmesh fs)) by (apply (wf_rmesh m); auto).
  set (c1 := set_digits (rmesh fs) (raxes fs P) (coords_of_rank (rmesh fs) n) k).
  set (c2 := set_digits m P (coords_of_rank m n) k).
  assert (Hc1 : valid (rmesh fs) c1) by (apply set_digits_valid; auto; apply coords_of_rank_valid; auto).
  assert (Hc2 : valid m c2) by (apply set_digits_valid; auto; apply coords_of_rank_valid; auto).
  set (n' := rank (rmesh fs) c1).
  assert (Hn' : n' < ndevices m) by (rewrite <- (ndevices_rmesh m fs); auto; apply rank_lt; auto).
  (* the user's coordinates of rank n' are c2's *)
  assert (Hco : forall a, a < length m -> coords_of_rank m n' a = c2 a).
  { intros a Ha. rewrite <- (refine_digit m fs a n') by auto.
    rewrite (mr_ext _ _ _ c1).
    2:{ intros b Hb. unfold n'. apply coords_of_rank_rank; auto. apply (grp_lt m fs a); auto. }
    unfold c1, c2. destruct (in_dec Nat.eq_dec a P) as [HaP|HaP].
    - apply in_split in HaP. destruct HaP as [L [R EP]].
      assert (Hpos : forall b, In b (raxes fs P) -> 0 < asize (rmesh fs) b).
      { intros b Hb. unfold raxes in Hb. apply in_flat_map in Hb as [a' [Ha' Hb]].
        apply Hm'. apply (grp_lt m fs a'); auto. }
      assert (Hnd' : NoDup (raxes fs P)) by (apply (nodup_flat_grp m); auto).
      assert (Hk' : k < nprod (rmesh fs) (raxes fs P)) by (unfold raxes; rewrite (nprod_flat_grp m); auto).
      assert (ER : raxes fs P = raxes fs L ++ grp fs a ++ raxes fs R).
      { unfold raxes. rewrite EP, flat_map_app. simpl. reflexivity. }
      assert (E2 : set_digits m P (coords_of_rank m n) k a = (k / nprod m R) mod asize m a).
      { rewrite <- (mr_single m a (set_digits m P (coords_of_rank m n) k)).
        assert (EP' : P = L ++ [a] ++ R) by (rewrite EP; reflexivity).
        rewrite EP'. rewrite mr_set_digits_mid, nprod_single; auto.
        - rewrite <- EP'. exact Hnd.
        - rewrite <- EP'. intros b Hb. apply Hm, HP, Hb.
        - rewrite <- EP'. exact Hk. }
      rewrite E2. rewrite ER in Hpos, Hnd', Hk' |- *.
      rewrite mr_set_digits_mid by auto.
      unfold raxes. rewrite (nprod_flat_grp m), (nprod_grp m); auto;
        intros b Hb; apply HP; rewrite EP; apply in_or_app; simpl; auto.
    - rewrite (mr_ext _ _ _ (coords_of_rank (rmesh fs) n)).
      + rewrite (refine_digit m) by auto. rewrite set_digits_other by auto. reflexivity.
      + intros b Hb. apply set_digits_other. unfold raxes. intros Hin.
        apply in_flat_map in Hin as [a' [Ha' Hb']].
        apply (grp_disjoint m fs a a' b); auto. intros ->. contradiction. }
  transitivity (rank m (coords_of_rank m n')).
  - symmetry. apply rank_coords_of_rank; auto.
  - apply rank_pt. exact Hco.
Qed.

(** The sum over a rank's group of a function of ranks is the same on the
    refined mesh (sub-axes of [P]) and on [m] ([P]). *)
Lemma refine_gsum_rank : forall M m fs P (f : nat -> carrier M) n, splits m fs -> wf_mesh m -> NoDup P ->
  (forall a, In a P -> a < length m) -> n < ndevices m ->
  gsum M (rmesh fs) (raxes fs P) (fun c => f (rank (rmesh fs) c)) (coords_of_rank (rmesh fs) n)
  = gsum M m P (fun c => f (rank m c)) (coords_of_rank m n).
Proof.
  intros M m fs P f n Hs Hm Hnd HP Hn. unfold gsum.
  unfold raxes at 2. rewrite (nprod_flat_grp m) by auto.
  apply msum_ext. intros k Hk. apply in_seq in Hk. f_equal. apply (refine_group_rank m); auto. lia.
Qed.

(** **End to end for partial types, on the user's mesh**: for every valid
    partial problem, [pplan_problem] returns a split [fs] of the user's mesh
    and a plan the partial checker accepts over it; if rank [n] of the
    user's mesh holds the local array [x n], and for every rank the
    reduction over its group of the source's pending axes on the user's
    mesh is its block of a global array [A] (over any commutative monoid),
    then running the plan with rank [n] as the refined mesh's device of rank
    [n] leaves local arrays whose reduction over every rank's group of the
    target's pending axes, on the user's mesh, is its block of [A] under
    the target. *)
Theorem pplan_spec_user : forall m src dst, pvalid_problem m src dst ->
  exists fs pp r, pplan_problem m src dst = Ok (fs, pp, r) /\
    splits m fs /\ ndevices (rmesh fs) = ndevices m /\
    pcheck (rmesh fs) (rptype fs src) (rptype fs dst) pp = Ok r /\
    forall M A (x : nat -> list nat -> carrier M),
      (forall n i, n < ndevices m -> in_range m (ptyp src) i ->
         gsum M m (paxes src) (fun c => x (rank m c) i) (coords_of_rank m n) = local A m (ptyp src) (coords_of_rank m n) i) ->
      forall n i, n < ndevices m -> in_range m (ptyp dst) i ->
        gsum M m (paxes dst)
          (fun c => pexec M (rmesh fs) (rptype fs src) pp (fun c' => x (rank (rmesh fs) c'))
                      (coords_of_rank (rmesh fs) (rank m c)) i)
          (coords_of_rank m n)
        = local A m (ptyp dst) (coords_of_rank m n) i.
Proof.
  intros m src dst Hv. destruct (pplan_spec m src dst Hv) as [fs [pp [r [H [Hs [Hnd [Hc [Hdata _]]]]]]]].
  exists fs, pp, r. split; [exact H|]. split; [exact Hs|]. split; [exact Hnd|]. split; [exact Hc|].
  destruct Hv as [[Hsw [HsN [HsR HsU]]] [[Hdw [HdN [HdR HdU]]] _]].
  assert (Hm : wf_mesh m) by apply Hsw.
  assert (Hm' : wf_mesh (rmesh fs)) by (apply (wf_rmesh m); auto).
  intros M A x Hx.
  set (x' := fun (c' : coords) => x (rank (rmesh fs) c')).
  assert (Hrep : represents M (rmesh fs) (rptype fs src) A x').
  { split.
    - intros c c' i _ Hcc _. unfold x'. f_equal. apply rank_pt. auto.
    - intros c i Hcv Hi. simpl in Hi |- *.
      set (n := rank (rmesh fs) c).
      assert (Hn : n < ndevices m) by (rewrite <- Hnd; apply rank_lt; auto).
      assert (Hcn : forall a, a < length (rmesh fs) -> coords_of_rank (rmesh fs) n a = c a)
        by (intros; apply coords_of_rank_rank; auto).
      transitivity (gsum M (rmesh fs) (raxes fs (paxes src)) (fun c' => x (rank (rmesh fs) c') i)
                      (coords_of_rank (rmesh fs) n)).
      + unfold gsum. apply msum_ext. intros k _. unfold x'. f_equal. apply rank_pt. intros a Ha.
        apply set_digits_pt. symmetry. apply Hcn, Ha.
      + rewrite (refine_gsum_rank M m fs (paxes src) (fun n => x n i)) by auto.
        rewrite Hx by (auto; eapply refine_in_range_back; eauto).
        rewrite <- (refine_local _ A m fs) by auto.
        apply local_coords. intros a Ha. apply Hcn.
        rewrite used_rtype in Ha. apply in_flat_map in Ha as [b [Hb Ha]].
        apply (grp_lt m fs b); auto. apply (wf_used_lt m (ptyp src)); auto. }
  destruct (Hdata M A x' Hrep) as [Hdev Hsum].
  intros n i Hn Hi.
  set (y := pexec M (rmesh fs) (rptype fs src) pp x').
  assert (Hi' : in_range (rmesh fs) (ptyp (rptype fs dst)) i) by (simpl; apply (refine_in_range m); auto).
  rewrite <- (refine_gsum_rank M m fs (paxes dst) (fun n => y (coords_of_rank (rmesh fs) n) i)) by auto.
  rewrite <- (refine_local _ A m fs) by auto.
  pose proof (Hsum (coords_of_rank (rmesh fs) n) i ltac:(apply coords_of_rank_valid; auto) Hi') as Hs'.
  cbn [ptyp paxes rptype] in Hs'. rewrite <- Hs'.
  unfold gsum. apply msum_ext. intros k _. cbn [ptyp paxes rptype].
  set (c' := set_digits (rmesh fs) (raxes fs (paxes dst)) (coords_of_rank (rmesh fs) n) k).
  assert (Hc' : valid (rmesh fs) c') by (apply set_digits_valid; auto; apply coords_of_rank_valid; auto).
  symmetry. apply Hdev; auto. intros a.
  destruct (Nat.lt_ge_cases a (length (rmesh fs))) as [Ha|Ha].
  - symmetry. apply coords_of_rank_rank; auto.
  - rewrite coords_of_rank_out by auto. unfold c'. rewrite set_digits_other.
    + apply coords_of_rank_out; auto.
    + unfold raxes. intros Hin. apply in_flat_map in Hin as [b [Hb Hin]].
      pose proof (grp_lt m fs b a Hs (HdR b Hb) Hin). lia.
Qed.
