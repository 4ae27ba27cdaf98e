(** The guarantee of [Minimal.mplan_problem]: what it returns is checked,
    moves the data, stays within the bound, and its own traffic is the
    figure the certificate proves least within the bound. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Validate Traffic Factor Refine Exec
  Certify Certifyproof Pipeline Pipelineproof Minimal.
Import ListNotations.

(** A certificate accepted over one split is accepted over another that
    gives the same sub-axes and the same refined types. *)
Lemma certify_split_same : forall m gs src dst m' hs src' dst' cap T cert,
  certify_split m gs src dst cap T cert = true -> map prod hs = m' ->
  rmesh hs = rmesh gs -> rtype hs src' = rtype gs src -> rtype hs dst' = rtype gs dst ->
  certify_split m' hs src' dst' cap T cert = true.
Proof.
  intros m gs src dst m' hs src' dst' cap T cert H Hs Hm Hsrc Hdst. unfold certify_split in *.
  apply andb_true_iff in H as [_ H]. rewrite Hm, Hsrc, Hdst, H, andb_true_r.
  apply nat_list_eqb_spec, Hs.
Qed.

(** When [mplan_problem] accepts the candidate, with split [fs], plan [p]
    and report [r]: the problem is valid; [fs] splits the user's mesh and the
    checker accepts [p] over it with report [r]; every device starts with
    its source block and ends with exactly its target block of any global
    array; every type along [p] is within [bound m src dst]; the certificate
    is accepted at [traffic (received r)], the plan's own traffic, which is
    therefore the least of any plan the checker accepts within the bound,
    over the user's mesh, over the plan's own mesh and over the prime
    sub-axes of size 2 or more. *)
Theorem mplan_spec : forall m src dst cand cert fs p r,
  mplan_problem m src dst cand cert = Ok (fs, p, r) ->
  valid_problem m src dst /\ splits m fs /\
  check (rmesh fs) (rtype fs src) (rtype fs dst) p = Ok r /\
  (forall V (A : list nat -> V) n i, n < ndevices m ->
     local A (rmesh fs) (rtype fs src) (coords_of_rank (rmesh fs) n) i = local A m src (coords_of_rank m n) i) /\
  (forall V (A : list nat -> V) n i, n < ndevices m -> in_range m dst i ->
     exec (rmesh fs) (rtype fs src) p (local A (rmesh fs) (rtype fs src)) (coords_of_rank (rmesh fs) n) i
     = local A m dst (coords_of_rank m n) i) /\
  Forall (fun t => size (rmesh fs) t <= bound m src dst) (types r) /\ peak r <= bound m src dst /\
  certify_split m (prime_parts m) src dst (bound m src dst) (traffic (received r)) cert = true /\
  (forall p' r', check m src dst p' = Ok r' -> peak r' <= bound m src dst ->
     traffic (received r) <= traffic (received r')) /\
  (forall p' r', check (rmesh fs) (rtype fs src) (rtype fs dst) p' = Ok r' -> peak r' <= bound m src dst ->
     traffic (received r) <= traffic (received r')) /\
  (forall p' r', check (rmesh (prime_parts m)) (rtype (prime_parts m) src) (rtype (prime_parts m) dst) p' = Ok r' ->
     peak r' <= bound m src dst -> traffic (received r) <= traffic (received r')).
Proof.
  intros m src dst cand cert fs p r H. unfold mplan_problem in H.
  destruct (problem_error m src dst) eqn:Hpe; [discriminate|].
  apply problem_error_valid in Hpe. pose proof Hpe as [Hsrc [Hdst _]].
  assert (Hm : wf_mesh m) by apply Hsrc.
  set (planned := match cand with
                  | Some p => Ok (prime_split m, lift_plan m src dst p)
                  | None => match plan_problem m src dst with
                            | Ok (fs, p, _) => Ok (fs, p)
                            | Err (i, e) => Err (MRefused i e)
                            end
                  end) in H.
  destruct planned as [[fs0 p0]|x]; [|discriminate].
  rewrite !rtype_fast_eq in H.
  destruct (check (rmesh fs0) (rtype fs0 src) (rtype fs0 dst) p0) as [r0|[i e]] eqn:Hc; [|discriminate].
  destruct (negb (peak r0 <=? bound m src dst)) eqn:Hpk; [discriminate|].
  apply negb_false_iff, Nat.leb_le in Hpk.
  destruct (nat_list_eqb (map prod fs0) m && nat_list_eqb (map prod (prime_parts (rmesh fs0))) (rmesh fs0)
            && nat_list_eqb (rmesh (prime_parts (rmesh fs0))) (rmesh (prime_parts m))
            && atype_eqb (rtype (prime_parts (rmesh fs0)) (rtype fs0 src)) (rtype (prime_parts m) src)
            && atype_eqb (rtype (prime_parts (rmesh fs0)) (rtype fs0 dst)) (rtype (prime_parts m) dst)
            && certify_split m (prime_parts m) src dst (bound m src dst) (traffic (received r0)) cert) eqn:Hok;
    [|discriminate].
  injection H as <- <- <-.
  repeat rewrite andb_true_iff in Hok.
  destruct Hok as [[[[[Hs Hhs] Hrm] Hrs] Hrd] Hcert].
  apply nat_list_eqb_spec in Hs, Hhs, Hrm. apply atype_eqb_spec in Hrs, Hrd.
  assert (Hs' : splits m fs0) by exact Hs.
  pose proof (certify_split_minimal _ _ _ _ _ _ _ Hcert) as [Hmin_m Hmin_g].
  pose proof (certify_split_same _ _ _ _ _ _ _ _ _ _ _ Hcert Hhs Hrm Hrs Hrd) as Hcert'.
  pose proof (certify_split_minimal _ _ _ _ _ _ _ Hcert') as [Hmin_f _].
  destruct (refined_check_spec m fs0 src dst p0 r0 Hpe Hs' Hc) as [Hl [He HF]].
  split; [exact Hpe|]. split; [exact Hs'|]. split; [exact Hc|]. split; [exact Hl|]. split; [exact He|].
  split; [eapply Forall_impl; [|exact HF]; intros t Ht; cbv beta in Ht; lia|].
  split; [exact Hpk|]. split; [exact Hcert|]. split; [exact Hmin_m|]. split; [exact Hmin_f|]. exact Hmin_g.
Qed.

(** Without a candidate the plan returned is the pipeline's own, with its
    report: [Pipelineproof.plan_spec] (normal form included) holds of it. *)
Theorem mplan_pipeline : forall m src dst cert fs p r,
  mplan_problem m src dst None cert = Ok (fs, p, r) -> plan_problem m src dst = Ok (fs, p, r).
Proof.
  intros m src dst cert fs p r H.
  destruct (mplan_spec m src dst None cert fs p r H) as [Hv [_ [Hc _]]].
  unfold mplan_problem in H. rewrite (problem_error_none m src dst Hv) in H.
  destruct (plan_problem m src dst) as [[[fs0 p0] r0]|[i e]] eqn:Hpp; [|discriminate].
  rewrite !rtype_fast_eq in H.
  destruct (check (rmesh fs0) (rtype fs0 src) (rtype fs0 dst) p0) as [r1|[i e]] eqn:Hc1; [|discriminate].
  destruct (negb (peak r1 <=? bound m src dst)); [discriminate|].
  match type of H with (if ?b then _ else _) = _ => destruct b end; [|discriminate].
  injection H as <- <- <-.
  destruct (plan_spec m src dst Hv) as [fs' [p' [r' [Hpp' [_ [_ [Hc' _]]]]]]].
  rewrite Hpp in Hpp'. injection Hpp' as <- <- <-. rewrite Hc1 in Hc'. injection Hc' as ->. reflexivity.
Qed.
