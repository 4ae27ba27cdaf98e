(** The end-to-end guarantee of [plan_problem]: on every valid problem it
    returns a plan over a refinement of the user's mesh (same devices, same
    ranks, same data) that the checker accepts, that moves the source
    distribution of every global array to its target distribution, that
    never holds more than [max(size src, size dst)] elements per device,
    and that is in normal form. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Validate Synth Synthproof
  Constructproof Search Searchproof Factor Refine Exec Traffic Trafficproof Pipeline.
Import ListNotations.

Lemma pfactors_prod : forall n, prod (pfactors n) = n.
Proof.
  intros n. unfold pfactors. destruct (Nat.leb_spec n 1) as [Hn|Hn].
  - unfold prod. simpl. lia.
  - apply factors_prod. lia.
Qed.

Lemma pfactors_prime : forall n e, 0 < n -> In e (pfactors n) -> e = 1 \/ is_prime e.
Proof.
  intros n e Hn He. unfold pfactors in He. destruct (Nat.leb_spec n 1) as [Hle|Hgt].
  - left. destruct He as [<-|[]]. lia.
  - right. eapply factors_prime; eauto.
Qed.

Lemma prime_split_splits : forall m, splits m (prime_split m).
Proof.
  intros m. unfold splits, prime_split. rewrite map_map.
  erewrite map_ext; [apply map_id|]. intros n. apply pfactors_prod.
Qed.

Lemma part_split_splits : forall m sp, splits m (part_split m sp).
Proof.
  intros m sp. unfold splits, part_split. rewrite map_map.
  erewrite map_ext; [apply map_nth_seq|].
  intros a. rewrite asize_nth. destruct (memb a sp); [apply pfactors_prod|]. unfold prod. simpl. apply Nat.mul_1_r.
Qed.

(** Every sub-axis of the prime refinement has size 1 or a prime. *)
Lemma prime_split_prime : forall m a, wf_mesh m -> a < length (rmesh (prime_split m)) ->
  asize (rmesh (prime_split m)) a = 1 \/ is_prime (asize (rmesh (prime_split m)) a).
Proof.
  intros m a Hm Ha. rewrite !asize_nth. set (x := nth a (rmesh (prime_split m)) 1).
  assert (Hx : In x (rmesh (prime_split m))) by (apply nth_In; exact Ha).
  unfold rmesh, prime_split in Hx. apply in_concat in Hx as [f [Hf Hxf]].
  apply in_map_iff in Hf as [n [<- Hn]]. apply (pfactors_prime n); auto.
  apply wf_meshb_spec in Hm. unfold wf_meshb in Hm. rewrite forallb_forall in Hm.
  apply Nat.ltb_lt, Hm, Hn.
Qed.

Lemma problem_error_none : forall m src dst, valid_problem m src dst -> problem_error m src dst = None.
Proof.
  intros m src dst [Hs [Hd Hg]].
  apply (problem_error_with_none wf); auto. apply wfb_spec. intros t [Hm _]. exact Hm.
Qed.

Lemma problem_error_valid : forall m src dst, problem_error m src dst = None -> valid_problem m src dst.
Proof.
  intros m src dst H. exact (problem_error_with_ok wf _ _ m src dst (wfb_spec m) H).
Qed.

Lemma refine_valid_problem : forall m fs src dst, splits m fs -> valid_problem m src dst ->
  valid_problem (rmesh fs) (rtype fs src) (rtype fs dst).
Proof.
  intros m fs src dst Hs [Hsrc [Hdst Hg]]. split; [|split]; try (apply (refine_wf m); auto).
  rewrite !refine_gsizes. exact Hg.
Qed.

(** What [plan_problem] returns always passed [validate] over its mesh. *)
Lemma plan_problem_validated : forall m src dst, valid_problem m src dst ->
  exists fs p r, plan_problem m src dst = Ok (fs, p, r) /\ splits m fs /\
    validate (rmesh fs) (rtype fs src) (rtype fs dst) p = Some r.
Proof.
  intros m src dst Hv. unfold plan_problem. rewrite problem_error_none by exact Hv. unfold plan_valid.
  rewrite !rtype_fast_eq.
  set (ff := prime_split m).
  assert (Hff : splits m ff) by apply prime_split_splits.
  assert (Hvf := refine_valid_problem m ff src dst Hff Hv).
  assert (Hrv : forall sp, problem_error (rmesh (part_split m sp)) (rtype (part_split m sp) src)
                             (rtype (part_split m sp) dst) = None).
  { intros sp. apply problem_error_none, (refine_valid_problem m); auto. apply part_split_splits. }
  set (vf := validator_valid (rmesh ff) (rtype ff src) (rtype ff dst)).
  destruct (synthesize_best_r_spec vf (rmesh ff) (rtype ff src) (rtype ff dst)) as [Ew Hr].
  assert (Hg : fst (synthesize_best (rmesh ff) (rtype ff src) (rtype ff dst)) = true).
  { apply synthesize_best_prime; auto. intros a Ha. apply prime_split_prime; auto.
    destruct Hv as [[Hm _] _]. exact Hm. }
  rewrite <- (synthesize_best_valid _ _ _ (problem_error_none _ _ _ Hvf)) in Hg. fold vf in Hg.
  rewrite Ew in Hg.
  destruct (synthesize_best_r vf (rmesh ff) (rtype ff src) (rtype ff dst)) as [[p0 r0]|] eqn:Eb; [|discriminate].
  assert (Hv0 : validate (rmesh ff) (rtype ff src) (rtype ff dst) p0 = Some r0).
  { rewrite <- (validator_valid_spec _ _ _ _ (problem_error_none _ _ _ Hvf)). apply Hr. reflexivity. }
  cbv zeta.
  destruct (forallb _ ff); [exists ff, p0, r0; auto|].
  destruct (coarsen ff p0 (S (length m)) []) as [[sp p]|].
  - rewrite ?rtype_fast_eq, (validator_valid_spec _ _ _ _ (Hrv _)).
    destruct (list_eqb (part_split m sp) ff && plan_eqb p p0); [exists ff, p0, r0; auto|].
    destruct (validate (rmesh (part_split m sp)) (rtype (part_split m sp) src) (rtype (part_split m sp) dst) p)
      as [r|] eqn:Hr'.
    + exists (part_split m sp), p, r. split; [reflexivity|]. split; [apply part_split_splits|exact Hr'].
    + exists ff, p0, r0. auto.
  - exists ff, p0, r0. auto.
Qed.

Lemma plan_problem_valid : forall m src dst, valid_problem m src dst -> plan_problem m src dst = plan_valid m src dst.
Proof. intros m src dst Hv. unfold plan_problem. rewrite problem_error_none by exact Hv. reflexivity. Qed.

Lemma refine_in_range : forall m fs t i, splits m fs -> wf m t ->
  in_range m t i -> in_range (rmesh fs) (rtype fs t) i.
Proof.
  intros m fs t i Hs Ht Hi. apply in_range_iff in Hi as [Hl Hk]. apply in_range_iff.
  unfold rtype. rewrite map_length. split; auto. intros j Hj.
  rewrite (nth_indep _ dflt (rdim fs dflt)) by (rewrite map_length; auto). rewrite map_nth.
  rewrite (refine_lsize m); auto. intros a Ha. apply (wf_axes_range m t (nth j t dflt)); auto.
  apply nth_In; auto.
Qed.

(** A plan the checker accepts over a split of the user's mesh: every
    device starts with its source block and ends with exactly its target
    block of any global array, and every type along it is within the peak. *)
Lemma refined_check_spec : forall m fs src dst p r, valid_problem m src dst -> splits m fs ->
  check (rmesh fs) (rtype fs src) (rtype fs dst) p = Ok r ->
  (forall V (A : list nat -> V) n i, n < ndevices m ->
     local A (rmesh fs) (rtype fs src) (coords_of_rank (rmesh fs) n) i = local A m src (coords_of_rank m n) i) /\
  (forall V (A : list nat -> V) n i, n < ndevices m -> in_range m dst i ->
     exec (rmesh fs) (rtype fs src) p (local A (rmesh fs) (rtype fs src)) (coords_of_rank (rmesh fs) n) i
     = local A m dst (coords_of_rank m n) i) /\
  Forall (fun t => size (rmesh fs) t <= peak r) (types r).
Proof.
  intros m fs src dst p r [Hsrc [Hdst _]] Hs Hc. assert (Hm : wf_mesh m) by apply Hsrc.
  split; [intros V A n i Hn; apply (refine_local V A m); auto|]. split.
  - intros V A n i Hn Hi. rewrite (check_exec V A _ _ _ _ _ Hc).
    + apply (refine_local V A m); auto.
    + apply coords_of_rank_valid, (wf_rmesh m); auto.
    + apply (refine_in_range m); auto.
  - apply Forall_forall. intros t Ht. apply check_ok_iff in Hc as [_ [_ [_ Hp]]].
    pose proof (peak_of_ge (rmesh fs) (types r) t Ht). lia.
Qed.

(** The end-to-end theorem. For every valid problem, [plan_problem] returns
    a split [fs] of the user's mesh, a plan [p] and a report [r] such that:
    the checker accepts [p] over the refined mesh with report [r]; the
    device of each rank starts with exactly its source block of any global
    array [A], and executing [p] by the data semantics leaves it exactly its
    target block; every type along the plan, hence the peak, is at most
    [max(size src, size dst)]; and [p] is in normal form, its slices adding
    only axes the target uses and its gathers removing only axes it does not. *)
Theorem plan_spec : forall m src dst, valid_problem m src dst ->
  exists fs p r, plan_problem m src dst = Ok (fs, p, r) /\
    splits m fs /\ ndevices (rmesh fs) = ndevices m /\
    check (rmesh fs) (rtype fs src) (rtype fs dst) p = Ok r /\
    (forall V (A : list nat -> V) n i, n < ndevices m ->
       local A (rmesh fs) (rtype fs src) (coords_of_rank (rmesh fs) n) i = local A m src (coords_of_rank m n) i) /\
    (forall V (A : list nat -> V) n i, n < ndevices m -> in_range m dst i ->
       exec (rmesh fs) (rtype fs src) p (local A (rmesh fs) (rtype fs src)) (coords_of_rank (rmesh fs) n) i
       = local A m dst (coords_of_rank m n) i) /\
    Forall (fun t => size (rmesh fs) t <= bound m src dst) (types r) /\
    peak r <= bound m src dst /\
    normal_form p /\ Forall (axes_ok_prop (rtype fs dst)) p.
Proof.
  intros m src dst Hv. destruct (plan_problem_validated m src dst Hv) as [fs [p [r [Hpp [Hs Hval]]]]].
  exists fs, p, r. pose proof Hv as [Hsrc [Hdst Hgs]].
  assert (Hm : wf_mesh m) by apply Hsrc.
  apply validate_spec in Hval as [Hc [Hpk [Hnf Hax]]].
  assert (Hbound : bound (rmesh fs) (rtype fs src) (rtype fs dst) = bound m src dst).
  { unfold bound. rewrite !(refine_size m) by auto. reflexivity. }
  rewrite Hbound in Hpk.
  destruct (refined_check_spec m fs src dst p r Hv Hs Hc) as [Hl [He HF]].
  split; [exact Hpp|]. split; [exact Hs|]. split; [apply (ndevices_rmesh m); auto|].
  split; [exact Hc|]. split; [exact Hl|]. split; [exact He|].
  split; [eapply Forall_impl; [|exact HF]; intros t Ht; cbv beta in Ht; lia|].
  split; [exact Hpk|]. split; [apply nf_slices_spec; auto|].
  apply Forall_forall. intros c Hcin. apply axes_ok_spec. rewrite forallb_forall in Hax. auto.
Qed.

(** * Traffic of the returned plan *)

Lemma refine_kept : forall m fs src dst r, splits m fs -> wf m src -> wf m dst -> r < ndevices m ->
  kept (rmesh fs) (rtype fs src) (rtype fs dst) (coords_of_rank (rmesh fs) r) = kept m src dst (coords_of_rank m r).
Proof.
  intros m fs src dst r Hs Hsrc Hdst Hr. pose proof Hsrc as [Hm _]. unfold kept, rtype.
  assert (HS : forall D, In D src -> forall a, In a (axes D) -> a < length m)
    by (intros D HDin a Ha; apply (wf_axes_range m src D); auto).
  assert (HD : forall D, In D dst -> forall a, In a (axes D) -> a < length m)
    by (intros D HDin a Ha; apply (wf_axes_range m dst D); auto).
  clear Hsrc Hdst. revert dst HD. induction src as [|D src IH]; intros [|E dst] HD; simpl; auto.
  rewrite !(refine_gidx m), !(refine_lsize m) by (auto; first [apply (HS D); simpl; auto | apply (HD E); simpl; auto]).
  f_equal. apply IH.
  - intros D' HD' a Ha. apply (HS D'); simpl; auto.
  - intros D' HD' a Ha. apply (HD D'); simpl; auto.
Qed.

Lemma refine_lower_bound : forall m fs src dst, splits m fs -> wf m src -> wf m dst ->
  lower_bound (rmesh fs) (rtype fs src) (rtype fs dst) = lower_bound m src dst.
Proof.
  intros m fs src dst Hs Hsrc Hdst. unfold lower_bound. rewrite (ndevices_rmesh m) by auto.
  f_equal. apply map_ext_in. intros n Hn. apply in_seq in Hn. unfold need.
  rewrite (refine_size m), (refine_kept m) by (auto; lia). reflexivity.
Qed.

(** The plan the user gets receives at least the transfer lower bound of
    the user's problem (no plan receives less: [accepted_traffic_lower_bound]). *)
Theorem plan_traffic : forall m src dst fs p r, valid_problem m src dst ->
  plan_problem m src dst = Ok (fs, p, r) -> lower_bound m src dst <= traffic (received r).
Proof.
  intros m src dst fs p r Hv Hpp.
  destruct (plan_spec m src dst Hv) as [fs' [p' [r' [Hpp' [Hs [_ [Hc _]]]]]]].
  rewrite Hpp in Hpp'. injection Hpp' as <- <- <-.
  rewrite <- (refine_lower_bound m fs) by (auto; apply Hv).
  eapply accepted_traffic_lower_bound; eauto.
Qed.

(** Where the plan the user gets meets the lower bound (94% of random
    problems on meshes of 1-3 axes, bench/results/traffic.md; fewer on
    larger meshes, bench/results/optimality.md), it is traffic-minimal: no plan
    the checker accepts receives less, on the user's mesh or on any
    refinement of it, since the lower bound is the same on all of them. *)
Theorem plan_traffic_optimal : forall m src dst fs p r, valid_problem m src dst ->
  plan_problem m src dst = Ok (fs, p, r) -> traffic (received r) = lower_bound m src dst ->
  check (rmesh fs) (rtype fs src) (rtype fs dst) p = Ok r /\
  (forall p' r', check m src dst p' = Ok r' -> traffic (received r) <= traffic (received r')) /\
  (forall fs' p' r', splits m fs' -> check (rmesh fs') (rtype fs' src) (rtype fs' dst) p' = Ok r' ->
     traffic (received r) <= traffic (received r')).
Proof.
  intros m src dst fs p r Hv Hpp Heq.
  destruct (plan_spec m src dst Hv) as [fs' [p' [r' [Hpp' [_ [_ [Hok _]]]]]]].
  rewrite Hpp in Hpp'. injection Hpp' as <- <- <-. rewrite Heq. split; [exact Hok|]. split.
  - intros p' r' Hc. eapply accepted_traffic_lower_bound; eauto.
  - intros fs' p' r' Hs Hc. rewrite <- (refine_lower_bound m fs') by (auto; apply Hv).
    eapply accepted_traffic_lower_bound; eauto.
Qed.
