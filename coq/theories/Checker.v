(** The plan checker: runs the typing rules along a plan and reports the
    types passed through, the peak local size and the elements each step
    makes a device receive. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules.
Import ListNotations.

(** A plan is a sequence of collectives. *)
Definition plan := list coll.

(** Well-typed chains of steps, with the types and received counts along them. *)
Inductive chain (m : mesh) : atype -> plan -> atype -> Prop :=
| chain_nil : forall t, chain m t [] t
| chain_cons : forall t c t1 p t', step m t c t1 -> chain m t1 p t' -> chain m t (c :: p) t'.

(** Some device's block changes between [t] and [t']. *)
Definition moves (m : mesh) (t t' : atype) : bool :=
  existsb (fun r => negb (nat_list_eqb (blocks m t (coords_of_rank m r)) (blocks m t' (coords_of_rank m r))))
          (seq 0 (ndevices m)).

(** Elements received per device by one step (the spec's table; for a
    permute, the most any device receives). *)
Definition recv (m : mesh) (t : atype) (c : coll) (t' : atype) : nat :=
  match c with
  | AllGather _ xs => (nprod m xs - 1) * size m t
  | DynSlice _ _ => 0
  | AllToAll _ _ xs => size m t - size m t / nprod m xs
  | AllPermute _ => if moves m t t' then size m t else 0
  end.

Inductive trace (m : mesh) : atype -> plan -> list atype -> list nat -> Prop :=
| trace_nil : forall t, trace m t [] [t] []
| trace_cons : forall t c t1 p ts rs,
    step m t c t1 -> trace m t1 p ts rs -> trace m t (c :: p) (t :: ts) (recv m t c t1 :: rs).

(** Peak memory: the largest local size along the way. *)
Definition peak_of (m : mesh) (ts : list atype) : nat :=
  fold_right (fun t acc => Nat.max (size m t) acc) 0 ts.

Definition dim_eq_dec : forall x y : dim, {x = y} + {x <> y}.
Proof. decide equality; [apply Nat.eq_dec | apply list_eq_dec, Nat.eq_dec]. Defined.

Definition atype_eqb (t t' : atype) : bool := if list_eq_dec dim_eq_dec t t' then true else false.

Lemma atype_eqb_spec : forall t t', atype_eqb t t' = true <-> t = t'.
Proof. intros. unfold atype_eqb. destruct (list_eq_dec dim_eq_dec t t'); split; congruence. Qed.

(** Run the rules from step number [i]; the first failure is reported with its number. *)
Fixpoint run (m : mesh) (t : atype) (p : plan) (i : nat) : result (nat * error) (list atype * list nat) :=
  match p with
  | [] => Ok ([t], [])
  | c :: p' =>
      match apply m t c with
      | Err e => Err (i, e)
      | Ok t1 =>
          match run m t1 p' (S i) with
          | Err x => Err x
          | Ok (ts, rs) => Ok (t :: ts, recv m t c t1 :: rs)
          end
      end
  end.

Record report := mkreport { types : list atype; peak : nat; received : list nat }.

(** Steps are numbered from 1; number 0 blames the mesh, source or target. *)
Definition check (m : mesh) (src dst : atype) (p : plan) : result (nat * error) report :=
  if negb (wf_meshb m) then Err (0, BadMesh) else
  if negb (wfb m src) then Err (0, BadSource) else
  if negb (wfb m dst) then Err (0, BadDest) else
  if negb (nat_list_eqb (map gsize src) (map gsize dst)) then Err (0, GlobalShapeMismatch) else
  match run m src p 1 with
  | Err x => Err x
  | Ok (ts, rs) =>
      if atype_eqb (last ts src) dst
      then Ok (mkreport ts (peak_of m ts) rs)
      else Err (length p, WrongResult)
  end.

(** The problem a plan solves. *)
Definition valid_problem (m : mesh) (src dst : atype) : Prop :=
  wf m src /\ wf m dst /\ map gsize src = map gsize dst.

Lemma trace_nonempty : forall m t p ts rs, trace m t p ts rs -> ts <> [].
Proof. intros m t p ts rs H. destruct H; discriminate. Qed.

Lemma trace_chain : forall m t p ts rs, trace m t p ts rs -> chain m t p (last ts t).
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH].
  - constructor.
  - pose proof (trace_nonempty _ _ _ _ _ Ht) as Hne.
    rewrite last_cons_ne by exact Hne. rewrite (last_indep _ ts t t1) by exact Hne.
    econstructor; eauto.
Qed.

Lemma chain_trace : forall m t p t', chain m t p t' ->
  exists ts rs, trace m t p ts rs /\ last ts t = t'.
Proof.
  intros m t p t' H. induction H as [t|t c t1 p t' Hs Hc IH].
  - exists [t], []. split; [constructor|reflexivity].
  - destruct IH as [ts [rs [Ht Hl]]].
    exists (t :: ts), (recv m t c t1 :: rs). split; [constructor; auto|].
    pose proof (trace_nonempty _ _ _ _ _ Ht) as Hne.
    rewrite last_cons_ne by exact Hne. rewrite (last_indep _ ts t t1) by exact Hne. exact Hl.
Qed.

(** [run] computes the trace of a plan from a well-formed type. *)
Lemma run_trace : forall m p t i ts rs, wf m t -> run m t p i = Ok (ts, rs) -> trace m t p ts rs.
Proof.
  intros m p. induction p as [|c p IH]; intros t i ts rs Hwf H; cbn [run] in H.
  - inversion H; subst. constructor.
  - destruct (apply m t c) as [t1|e] eqn:Ha; [|discriminate].
    destruct (run m t1 p (S i)) as [[ts' rs']|x] eqn:Hr; [|discriminate].
    inversion H; subst. apply apply_sound in Ha; auto.
    constructor; auto. apply (IH t1 (S i)); auto. eapply step_wf; eauto.
Qed.

Lemma trace_run : forall m t p ts rs, wf m t -> trace m t p ts rs -> forall i, run m t p i = Ok (ts, rs).
Proof.
  intros m t p ts rs Hwf H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros i.
  - reflexivity.
  - cbn [run]. rewrite (apply_complete m t c t1 Hwf Hs).
    rewrite IH by (eapply step_wf; eauto). reflexivity.
Qed.

Lemma run_error : forall m p t k i e, wf m t -> run m t p k = Err (i, e) ->
  k <= i /\ exists t', chain m t (firstn (i - k) p) t' /\
                       exists c, nth_error p (i - k) = Some c /\ apply m t' c = Err e.
Proof.
  intros m p. induction p as [|c p IH]; intros t k i e Hwf H; cbn [run] in H.
  - discriminate.
  - destruct (apply m t c) as [t1|e0] eqn:Ha.
    + destruct (run m t1 p (S k)) as [[ts rs]|x] eqn:Hr; [discriminate|].
      inversion H; subst x.
      assert (Hs : step m t c t1) by (apply apply_sound; auto).
      apply IH in Hr as [Hle [t' [Hc [c' [Hn Ha']]]]]; [|eapply step_wf; eauto].
      split; [lia|]. replace (i - k) with (S (i - S k)) by lia.
      exists t'. split.
      * cbn [firstn]. econstructor; eauto.
      * exists c'. split; auto.
    + inversion H; subst. split; auto. rewrite Nat.sub_diag.
      exists t. split; [constructor|]. exists c. split; auto.
Qed.

(** Success means exactly: a valid problem, a well-typed chain from [src] to
    [dst], and a report whose types, peak and traffic are those of the chain. *)
Theorem check_ok_iff : forall m src dst p r,
  check m src dst p = Ok r <->
  valid_problem m src dst /\ trace m src p (types r) (received r) /\
  last (types r) src = dst /\ peak r = peak_of m (types r).
Proof.
  intros m src dst p r. split.
  - unfold check. intros H.
    destruct (wf_meshb m) eqn:Hm; cbn [negb] in H; [|discriminate].
    destruct (wfb m src) eqn:Hs; cbn [negb] in H; [|discriminate].
    destruct (wfb m dst) eqn:Hd; cbn [negb] in H; [|discriminate].
    destruct (nat_list_eqb (map gsize src) (map gsize dst)) eqn:Hg; cbn [negb] in H; [|discriminate].
    destruct (run m src p 1) as [[ts rs]|x] eqn:Hr; [|discriminate].
    destruct (atype_eqb (last ts src) dst) eqn:He; [|discriminate].
    inversion H; subst r. cbn [types received peak].
    apply wfb_spec in Hs, Hd. apply nat_list_eqb_spec in Hg. apply atype_eqb_spec in He.
    split; [split; [|split]; auto|split; [|split]; auto]. apply (run_trace m p src 1); auto.
  - intros [[Hs [Hd Hg]] [Ht [Hl Hp]]]. unfold check.
    assert (Hm : wf_meshb m = true) by (apply wf_meshb_spec; apply Hs).
    assert (Hs' : wfb m src = true) by (apply wfb_spec; auto).
    assert (Hd' : wfb m dst = true) by (apply wfb_spec; auto).
    assert (Hg' : nat_list_eqb (map gsize src) (map gsize dst) = true) by (apply nat_list_eqb_spec; auto).
    assert (He : atype_eqb (last (types r) src) dst = true) by (apply atype_eqb_spec; auto).
    rewrite Hm, Hs', Hd', Hg'. cbn [negb].
    rewrite (trace_run m src p (types r) (received r) Hs Ht 1).
    rewrite He. destruct r as [ts pk rs]. cbn [types peak received] in *. subst pk. reflexivity.
Qed.

Corollary check_accepts_iff_chain : forall m src dst p,
  (exists r, check m src dst p = Ok r) <-> valid_problem m src dst /\ chain m src p dst.
Proof.
  intros m src dst p. split.
  - intros [r Hr]. apply check_ok_iff in Hr as [Hv [Ht [Hl _]]].
    split; auto. rewrite <- Hl. eapply trace_chain; eauto.
  - intros [Hv Hc]. destruct (chain_trace m src p dst Hc) as [ts [rs [Ht Hl]]].
    exists (mkreport ts (peak_of m ts) rs). apply check_ok_iff. cbn [types received peak].
    auto.
Qed.

(** An error at step [i >= 1] names the first step that is ill-typed: the
    steps before it form a chain, and step [i] is rejected for reason [e]. *)
Theorem check_error_first : forall m src dst p i e,
  check m src dst p = Err (i, e) -> 1 <= i <= length p -> e <> WrongResult ->
  exists t, chain m src (firstn (i - 1) p) t /\
            exists c, nth_error p (i - 1) = Some c /\ apply m t c = Err e.
Proof.
  intros m src dst p i e H Hi Hne. unfold check in H.
  destruct (wf_meshb m) eqn:Hm; cbn [negb] in H; [|inversion H; lia].
  destruct (wfb m src) eqn:Hs; cbn [negb] in H; [|inversion H; lia].
  destruct (wfb m dst) eqn:Hd; cbn [negb] in H; [|inversion H; lia].
  destruct (nat_list_eqb (map gsize src) (map gsize dst)) eqn:Hg; cbn [negb] in H; [|inversion H; lia].
  destruct (run m src p 1) as [[ts rs]|x] eqn:Hr.
  - destruct (atype_eqb (last ts src) dst); inversion H; subst; congruence.
  - inversion H; subst x. apply wfb_spec in Hs.
    apply run_error in Hr as [_ Hr]; auto.
Qed.
