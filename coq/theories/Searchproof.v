(** What [Search.synthesize_best] guarantees: over a prime mesh its plan
    always passes [validate], and no candidate it validated (the
    synthesizer's constructions and the searched plans) receives less. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Validate Synth Synthproof Constructproof Search Traffic.
Import ListNotations.

Lemma plan_eqb_true : forall p q, plan_eqb p q = true -> p = q.
Proof. intros p q. unfold plan_eqb. destruct (list_eq_dec coll_eq_dec p q); congruence. Qed.

(** [better] compares costs by their first component (traffic) first. *)
Lemma better_true_le : forall a x b y, better (a :: x) (b :: y) = true -> a <= b.
Proof.
  intros a x b y H. simpl in H. apply orb_true_iff in H as [H|H].
  - apply Nat.ltb_lt in H. lia.
  - apply andb_true_iff in H as [H _]. apply Nat.eqb_eq in H. lia.
Qed.

Lemma better_false_ge : forall a x b y, better (a :: x) (b :: y) = false -> b <= a.
Proof.
  intros a x b y H. simpl in H. apply orb_false_iff in H as [H _].
  apply Nat.ltb_ge in H. exact H.
Qed.

Definition first (k : list nat) : nat := hd 0 k.

Lemma first_cost : forall G p r, first (cost G p r) = traffic (received r).
Proof. reflexivity. Qed.

(** The invariant of [pick]'s fold: the kept plan validated with the kept
    report and cost, and it receives no more than any validated plan seen so far. *)
Definition pick_inv (m : mesh) (src dst : atype) (G : list nat)
    (acc : list plan * option (plan * report * list nat)) : Prop :=
  (forall p0 r0 k0, snd acc = Some (p0, r0, k0) -> validate m src dst p0 = Some r0 /\ k0 = cost G p0 r0) /\
  (forall q rq, In q (fst acc) -> validate m src dst q = Some rq ->
     exists p0 r0 k0, snd acc = Some (p0, r0, k0) /\ first k0 <= traffic (received rq)).

Lemma pick_step_inv : forall m src dst G acc x, pick_inv m src dst G acc ->
  pick_inv m src dst G (pick_step (validator m src dst) G acc x) /\
  In x (fst (pick_step (validator m src dst) G acc x)) /\
  (forall q, In q (fst acc) -> In q (fst (pick_step (validator m src dst) G acc x))).
Proof.
  intros m src dst G [seen best] x [Hk Hs]. unfold pick_step. rewrite validator_spec. cbn [fst snd] in *.
  destruct (existsb (plan_eqb x) seen) eqn:Ex.
  - apply existsb_exists in Ex as [y [Hy Exy]]. apply plan_eqb_true in Exy. subst y.
    split; [split; assumption|]. auto.
  - cbn [fst snd]. split; [|split; [left; reflexivity|intros q Hq; right; exact Hq]].
    destruct (validate m src dst x) as [rx|] eqn:Ev.
    + set (k := cost G x rx).
      destruct best as [[[p0 r0] k0]|] eqn:Eb.
      * destruct (Hk p0 r0 k0 eq_refl) as [Hv0 Ek0].
        destruct (better k k0) eqn:Ebt.
        -- split.
           ++ intros p1 r1 k1 E. inversion E; subst. auto.
           ++ intros q rq [<-|Hq] Hvq.
              ** rewrite Ev in Hvq. inversion Hvq; subst rq. exists x, rx, k. split; [reflexivity|].
                 subst k. rewrite first_cost. lia.
              ** destruct (Hs q rq Hq Hvq) as [p2 [r2 [k2 [E2 Hle]]]]. inversion E2; subst p2 r2 k2.
                 exists x, rx, k. split; [reflexivity|]. subst k. unfold cost in Ebt |- *. rewrite Ek0 in Ebt, Hle.
                 unfold cost in Ebt, Hle. apply better_true_le in Ebt. simpl in Hle |- *. lia.
        -- split.
           ++ intros p1 r1 k1 E. inversion E; subst. auto.
           ++ intros q rq [<-|Hq] Hvq.
              ** rewrite Ev in Hvq. inversion Hvq; subst rq. exists p0, r0, k0. split; [reflexivity|].
                 subst k. rewrite Ek0 in Ebt |- *. unfold cost in Ebt |- *.
                 apply better_false_ge in Ebt. simpl. unfold traffic. lia.
              ** exact (Hs q rq Hq Hvq).
      * split.
        -- intros p1 r1 k1 E. inversion E; subst. auto.
        -- intros q rq [<-|Hq] Hvq.
           ++ rewrite Ev in Hvq. inversion Hvq; subst rq. exists x, rx, k. split; [reflexivity|].
              subst k. rewrite first_cost. lia.
           ++ destruct (Hs q rq Hq Hvq) as [p2 [r2 [k2 [E2 _]]]]. discriminate.
    + split; [exact Hk|]. intros q rq [<-|Hq] Hvq; [congruence|]. exact (Hs q rq Hq Hvq).
Qed.

Lemma pick_fold_inv : forall m src dst G ps acc, pick_inv m src dst G acc ->
  pick_inv m src dst G (fold_left (pick_step (validator m src dst) G) ps acc) /\
  (forall q, In q ps \/ In q (fst acc) -> In q (fst (fold_left (pick_step (validator m src dst) G) ps acc))).
Proof.
  induction ps as [|x ps IH]; intros acc Hi; simpl.
  - split; [exact Hi|]. intros q [[]|Hq]; exact Hq.
  - destruct (pick_step_inv m src dst G acc x Hi) as [Hi' [Hx Hsub]].
    destruct (IH _ Hi') as [Hf Hin]. split; [exact Hf|].
    intros q [[<-|Hq]|Hq]; apply Hin; auto.
Qed.

(** [pick] keeps a plan that receives no more than any plan of the list that validates. *)
Theorem pick_min : forall m src dst ps q rq, In q ps -> validate m src dst q = Some rq ->
  exists p r, pick m src dst ps = Some p /\ validate m src dst p = Some r /\
    traffic (received r) <= traffic (received rq).
Proof.
  intros m src dst ps q rq Hq Hvq. unfold pick, pick_with, pick_with_r. set (G := glue m src dst).
  assert (H0 : pick_inv m src dst G ([], None)).
  { split; [intros; discriminate|intros ? ? []]. }
  destruct (pick_fold_inv m src dst G ps _ H0) as [[Hk Hs] Hin].
  destruct (Hs q rq (Hin q (or_introl Hq)) Hvq) as [p0 [r0 [k0 [E Hle]]]].
  rewrite E. destruct (Hk p0 r0 k0 E) as [Hv0 Ek]. exists p0, r0. simpl.
  split; [reflexivity|]. split; [exact Hv0|]. subst k0. rewrite first_cost in Hle. exact Hle.
Qed.

Lemma synthesize_best_pick : forall m src dst, synthesize_best m src dst =
  match pick m src dst (candidates m src dst ++ searched m src dst) with
  | Some p => (true, p)
  | None => (false, naive m src dst)
  end.
Proof. reflexivity. Qed.

Lemma pick_with_ext : forall v v' G ps, (forall p, v p = v' p) -> pick_with v G ps = pick_with v' G ps.
Proof.
  intros v v' G ps H. unfold pick_with, pick_with_r. f_equal. f_equal. f_equal.
  generalize (@nil plan, @None (plan * report * list nat)).
  induction ps as [|x ps IH]; intros acc; simpl; auto. rewrite <- IH. f_equal.
  unfold pick_step. rewrite H. reflexivity.
Qed.

(** Where the problem is valid, validating without its own checks picks the same plan. *)
Lemma synthesize_best_valid : forall m src dst, problem_error m src dst = None ->
  synthesize_best_with (validator_valid m src dst) m src dst = synthesize_best m src dst.
Proof.
  intros m src dst E. unfold synthesize_best, synthesize_best_with.
  rewrite (pick_with_ext (validator_valid m src dst) (validator m src dst)); auto.
  intros p. rewrite validator_spec. apply validator_valid_spec; auto.
Qed.

(** Over a prime mesh the plan always validates (the canonical plan does,
    [Synth.canonical_validates]). *)
Theorem synthesize_best_prime : forall m src dst, valid_problem m src dst ->
  (forall a, a < length m -> asize m a = 1 \/ is_prime (asize m a)) ->
  fst (synthesize_best m src dst) = true /\
  exists r, validate m src dst (snd (synthesize_best m src dst)) = Some r.
Proof.
  intros m src dst Hv Hp.
  destruct (canonical_validates m src dst Hv (cap_ok_prime m src dst Hv Hp)) as [r Hr].
  assert (Hin : In (canonical m src dst) (candidates m src dst ++ searched m src dst)).
  { apply in_or_app. left. unfold candidates, canonical. cbv zeta. left. reflexivity. }
  destruct (pick_min m src dst _ _ _ Hin Hr) as [p [r' [Ep [Hv' _]]]].
  rewrite synthesize_best_pick, Ep. simpl. eauto.
Qed.

(** Traffic-minimal among the candidates: no plan among the synthesizer's
    constructions and the searched plans that passes [validate] receives
    less than the plan returned. *)
Theorem synthesize_best_min : forall m src dst q rq,
  In q (candidates m src dst ++ searched m src dst) -> validate m src dst q = Some rq ->
  exists r, validate m src dst (snd (synthesize_best m src dst)) = Some r /\
    traffic (received r) <= traffic (received rq).
Proof.
  intros m src dst q rq Hq Hvq. destruct (pick_min m src dst _ _ _ Hq Hvq) as [p [r [Ep [Hv Hle]]]].
  rewrite synthesize_best_pick, Ep. simpl. eauto.
Qed.

(** [pick_with_r] keeps the plan [pick_with] keeps, with the report the
    validator gave it. *)
Lemma pick_with_r_spec : forall v G ps,
  option_map fst (pick_with_r v G ps) = pick_with v G ps /\
  (forall p r, pick_with_r v G ps = Some (p, r) -> v p = Some r).
Proof. intros v G ps. split; [reflexivity|apply pick_with_r_valid]. Qed.

Lemma synthesize_best_r_spec : forall v m src dst,
  synthesize_best_with v m src dst =
    match synthesize_best_r v m src dst with Some (p, _) => (true, p) | None => (false, naive m src dst) end /\
  (forall p r, synthesize_best_r v m src dst = Some (p, r) -> v p = Some r).
Proof.
  intros v m src dst. unfold synthesize_best_with, synthesize_best_r.
  destruct (pick_with_r_spec v (glue m src dst) (candidates m src dst ++ searched m src dst)) as [E H].
  split; [|exact H]. rewrite <- E.
  destruct (pick_with_r v (glue m src dst) (candidates m src dst ++ searched m src dst)) as [[p r]|]; reflexivity.
Qed.
