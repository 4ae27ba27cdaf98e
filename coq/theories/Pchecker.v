(** The checker of partial plans: the typing rules of [Partial.v] run
    step by step, with the types along the way, their peak and the
    elements each step receives; and what its success means for the data.
    The counterpart of [Checker.v] for types with pending axes. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Monoid Partial Partialproof.
Import ListNotations.

(** * Running the rules *)

(** The rules from step number [i]; the first failure is reported with its number. *)
Fixpoint prun (m : mesh) (pt : ptype) (p : pplan) (i : nat) : result (nat * perror) (list ptype * list nat) :=
  match p with
  | [] => Ok ([pt], [])
  | op :: p' =>
      match papply m pt op with
      | Err e => Err (i, e)
      | Ok pt1 =>
          match prun m pt1 p' (S i) with
          | Err x => Err x
          | Ok (ts, rs) => Ok (pt :: ts, precv m pt op pt1 :: rs)
          end
      end
  end.

(** The types a partial plan goes through and what each step receives. *)
Inductive ptrace (m : mesh) : ptype -> pplan -> list ptype -> list nat -> Prop :=
| ptrace_nil : forall pt, ptrace m pt [] [pt] []
| ptrace_cons : forall pt op pt1 p ts rs,
    pstep m pt op pt1 -> ptrace m pt1 p ts rs -> ptrace m pt (op :: p) (pt :: ts) (precv m pt op pt1 :: rs).

Lemma ptrace_nonempty : forall m pt p ts rs, ptrace m pt p ts rs -> ts <> [].
Proof. intros m pt p ts rs H. destruct H; discriminate. Qed.

Lemma prun_ptrace : forall m p pt i ts rs, pwf m pt -> prun m pt p i = Ok (ts, rs) -> ptrace m pt p ts rs.
Proof.
  intros m p. induction p as [|op p IH]; intros pt i ts rs Hwf H; cbn [prun] in H.
  - inversion H; subst. constructor.
  - destruct (papply m pt op) as [pt1|e] eqn:Ha; [|discriminate].
    destruct (prun m pt1 p (S i)) as [[ts' rs']|x] eqn:Hr; [|discriminate].
    inversion H; subst. apply papply_sound in Ha; auto.
    constructor; auto. apply (IH pt1 (S i)); auto. eapply pstep_wf; eauto.
Qed.

Lemma ptrace_prun : forall m pt p ts rs, pwf m pt -> ptrace m pt p ts rs -> forall i, prun m pt p i = Ok (ts, rs).
Proof.
  intros m pt p ts rs Hwf H. induction H as [pt|pt op pt1 p ts rs Hs Ht IH]; intros i.
  - reflexivity.
  - cbn [prun]. rewrite (papply_complete m pt op pt1 Hwf Hs).
    rewrite IH by (eapply pstep_wf; eauto). reflexivity.
Qed.

Lemma last_default : forall A (l : list A) d d', l <> [] -> last l d = last l d'.
Proof.
  intros A l d d' H. induction l as [|x l IH]; [congruence|].
  destruct l as [|y l]; [reflexivity|]. cbn [last]. apply IH. discriminate.
Qed.

Lemma ptrace_pchain : forall m pt p ts rs, ptrace m pt p ts rs -> pchain m pt p (last ts pt).
Proof.
  intros m pt p ts rs H. induction H as [pt|pt op pt1 p ts rs Hs Ht IH]; [constructor|].
  pose proof (ptrace_nonempty _ _ _ _ _ Ht) as Hne.
  replace (last (pt :: ts) pt) with (last ts pt1).
  - econstructor; eauto.
  - destruct ts as [|x ts]; [congruence|]. change (last (pt :: x :: ts) pt) with (last (x :: ts) pt).
    apply last_default. discriminate.
Qed.

(** Two traces one after the other. *)
Lemma ptrace_app : forall m pt p ts rs, ptrace m pt p ts rs ->
  forall q ts' rs', ptrace m (last ts pt) q ts' rs' -> ptrace m pt (p ++ q) (removelast ts ++ ts') (rs ++ rs').
Proof.
  intros m pt p ts rs H. induction H as [pt|pt op pt1 p ts rs Hs Ht IH]; intros q ts' rs' H'.
  - exact H'.
  - pose proof (ptrace_nonempty _ _ _ _ _ Ht) as Hne.
    replace (removelast (pt :: ts) ++ ts') with (pt :: (removelast ts ++ ts')).
    + cbn [app]. constructor; auto. apply IH.
      destruct ts as [|x ts]; [congruence|]. change (last (pt :: x :: ts) pt) with (last (x :: ts) pt) in H'.
      rewrite (last_default _ (x :: ts) pt1 pt) by discriminate. exact H'.
    + destruct ts as [|x ts]; [congruence|]. reflexivity.
Qed.

Lemma last_app_ne : forall A (l l' : list A) d, l' <> [] -> last (l ++ l') d = last l' d.
Proof.
  intros A l l' d H. induction l as [|x l IH]; [reflexivity|].
  cbn [app]. rewrite <- IH. destruct l as [|y l]; [destruct l' as [|z l']; [congruence|reflexivity]|reflexivity].
Qed.

(** Plans of the four collectives on types with nothing pending trace as
    in [Checker]. *)
Lemma trace_ptrace : forall m t p ts rs, trace m t p ts rs ->
  ptrace m (mkptype [] t) (map PColl p) (map (mkptype []) ts) rs.
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; [constructor|].
  cbn [map]. change (recv m t c t1) with (precv m (mkptype [] t) (PColl c) (mkptype [] t1)).
  constructor; auto. constructor; auto.
Qed.

(** * The checker *)

(** Why a partial problem is not one: the counterpart of [problem_error]. *)
Definition pproblem_error (m : mesh) (src dst : ptype) : option error :=
  problem_error_with pwfb (fun pt => map gsize (ptyp pt)) m src dst.

Definition pvalid_problem (m : mesh) (src dst : ptype) : Prop :=
  pwf m src /\ pwf m dst /\ map gsize (ptyp src) = map gsize (ptyp dst).

Lemma pproblem_error_none : forall m src dst, pvalid_problem m src dst -> pproblem_error m src dst = None.
Proof.
  intros m src dst [Hs [Hd Hg]].
  apply (problem_error_with_none pwf); auto. apply pwfb_spec. intros t [[Hm _] _]. exact Hm.
Qed.

Lemma pproblem_error_spec : forall m src dst, pproblem_error m src dst = None -> pvalid_problem m src dst.
Proof.
  intros m src dst H. exact (problem_error_with_ok pwf _ _ m src dst (pwfb_spec m) H).
Qed.

(** The same partial type: the same array type, and the same pending axes
    in any order (the reduction does not depend on it, [gsum_perm]). *)
Definition psame (a b : ptype) : bool :=
  atype_eqb (ptyp a) (ptyp b) && forallb (fun x => memb x (paxes b)) (paxes a)
  && forallb (fun x => memb x (paxes a)) (paxes b).

Record preport := mkpreport { ptypes : list ptype; ppeak : nat; preceived : list nat }.

Definition ppeak_of (m : mesh) (ts : list ptype) : nat :=
  fold_right (fun pt acc => Nat.max (size m (ptyp pt)) acc) 0 ts.

Lemma ppeak_of_le : forall m ts b, ppeak_of m ts <= b <-> Forall (fun pt => size m (ptyp pt) <= b) ts.
Proof.
  intros m ts b. induction ts as [|pt ts IH]; cbn [ppeak_of fold_right].
  - split; [constructor|lia].
  - fold (ppeak_of m ts). rewrite Forall_cons_iff, <- IH. lia.
Qed.

(** Check a partial plan from [src] to [dst]; numbers as in [check]. *)
Definition pcheck (m : mesh) (src dst : ptype) (p : pplan) : result (nat * perror) preport :=
  match pproblem_error m src dst with Some e => Err (0, CollError e) | None =>
  match prun m src p 1 with
  | Err x => Err x
  | Ok (ts, rs) =>
      if psame (last ts src) dst
      then Ok (mkpreport ts (ppeak_of m ts) rs)
      else Err (length p, CollError WrongResult)
  end end.

(** The memory bound of a partial problem. *)
Definition pbound (m : mesh) (src dst : ptype) : nat := Nat.max (size m (ptyp src)) (size m (ptyp dst)).

(** Accepted and within the bound. *)
Definition pvalidate (m : mesh) (src dst : ptype) (p : pplan) : option preport :=
  match pcheck m src dst p with
  | Ok r => if ppeak r <=? pbound m src dst then Some r else None
  | Err _ => None
  end.

(** * What acceptance means *)

Lemma psame_spec : forall m a b, pwf m a -> pwf m b -> psame a b = true ->
  ptyp a = ptyp b /\ Permutation (paxes a) (paxes b).
Proof.
  intros m a b Ha Hb H. unfold psame in H. apply andb_true_iff in H as [H H2].
  apply andb_true_iff in H as [He H1]. apply atype_eqb_spec in He. split; auto.
  rewrite forallb_forall in H1, H2. apply NoDup_Permutation; [apply Ha|apply Hb|].
  intros x. split; intros Hx; [apply H1 in Hx|apply H2 in Hx]; apply memb_spec; auto.
Qed.

(** The pending axes may be listed in any order. *)
Lemma represents_perm : forall M m P Q t A (x : coords -> list nat -> carrier M),
  pwf m (mkptype P t) -> Permutation P Q -> represents M m (mkptype P t) A x -> represents M m (mkptype Q t) A x.
Proof.
  intros M m P Q t A x Hwf Hp [Hd Hx]. split; [exact Hd|]. intros c i Hc Hi. cbn [paxes ptyp] in *.
  rewrite <- (gsum_perm M m P Q); auto.
  - apply Hwf.
  - apply Hwf.
  - apply Hwf.
  - apply (dev_fdev M m t x i Hd Hi).
Qed.

(** Success means: a valid problem, a trace from [src] whose last type is
    [dst] up to the order of the pending axes, and a report whose types,
    peak and traffic are those of the trace. *)
Theorem pcheck_ok : forall m src dst p r, pcheck m src dst p = Ok r ->
  pvalid_problem m src dst /\ ptrace m src p (ptypes r) (preceived r) /\
  ptyp (last (ptypes r) src) = ptyp dst /\ Permutation (paxes (last (ptypes r) src)) (paxes dst) /\
  ppeak r = ppeak_of m (ptypes r).
Proof.
  intros m src dst p r H. unfold pcheck in H.
  destruct (pproblem_error m src dst) eqn:Hpe; [discriminate|].
  apply pproblem_error_spec in Hpe. pose proof Hpe as [Hs [Hd _]].
  destruct (prun m src p 1) as [[ts rs]|x] eqn:Hr; [|discriminate].
  destruct (psame (last ts src) dst) eqn:Hsame; [|discriminate].
  inversion H; subst r. cbn [ptypes preceived ppeak].
  apply prun_ptrace in Hr; auto.
  assert (Hl : pwf m (last ts src)) by (eapply pchain_wf; [exact Hs|eapply ptrace_pchain; eauto]).
  destruct (psame_spec m _ _ Hl Hd Hsame). auto.
Qed.

(** An accepted partial plan takes any representation of any global array
    under the source to one of the same array under the target, over any
    commutative monoid. *)
Theorem pcheck_correct : forall m src dst p r, pcheck m src dst p = Ok r ->
  forall M A (x : coords -> list nat -> carrier M),
    represents M m src A x -> represents M m dst A (pexec M m src p x).
Proof.
  intros m src dst p r H M A x Hx.
  destruct (pcheck_ok m src dst p r H) as [[Hs [Hd _]] [Ht [Ety [Eax _]]]].
  pose proof (ptrace_pchain _ _ _ _ _ Ht) as Hch.
  pose proof (pexec_correct M m src p _ A x Hs Hch Hx) as Hl.
  pose proof (pchain_wf _ _ _ _ Hs Hch) as Hwl.
  remember (last (ptypes r) src) as l eqn:E. destruct l as [P t]. destruct dst as [Q t'].
  cbn [ptyp paxes] in *. subst t'. eapply represents_perm; eauto.
Qed.

(** Accepted within the bound: every type along the plan fits. *)
Theorem pvalidate_spec : forall m src dst p r, pvalidate m src dst p = Some r ->
  pcheck m src dst p = Ok r /\ ppeak r <= pbound m src dst /\
  Forall (fun pt => size m (ptyp pt) <= pbound m src dst) (ptypes r).
Proof.
  intros m src dst p r H. unfold pvalidate in H.
  destruct (pcheck m src dst p) as [r'|] eqn:Hc; [|discriminate].
  destruct (ppeak r' <=? pbound m src dst) eqn:Hb; [|discriminate]. inversion H; subst r'.
  apply Nat.leb_le in Hb. split; auto. split; auto.
  destruct (pcheck_ok m src dst p r Hc) as [_ [_ [_ [_ Hp]]]]. apply ppeak_of_le. lia.
Qed.

(** The converse: a trace ending at [dst] within the bound is accepted. *)
Lemma pvalidate_complete : forall m src dst p ts rs, pvalid_problem m src dst ->
  ptrace m src p ts rs -> last ts src = dst ->
  Forall (fun pt => size m (ptyp pt) <= pbound m src dst) ts ->
  pvalidate m src dst p = Some (mkpreport ts (ppeak_of m ts) rs).
Proof.
  intros m src dst p ts rs Hv Ht Hl Hf. unfold pvalidate, pcheck.
  rewrite (pproblem_error_none m src dst Hv).
  rewrite (ptrace_prun m src p ts rs (proj1 Hv) Ht 1).
  assert (Hsame : psame (last ts src) dst = true).
  { rewrite Hl. unfold psame. rewrite (proj2 (atype_eqb_spec _ _) eq_refl).
    cbn [andb]. apply andb_true_iff. split; apply forallb_forall; intros x Hx; apply memb_spec; auto. }
  rewrite Hsame. cbn [ppeak]. apply ppeak_of_le in Hf. apply Nat.leb_le in Hf. rewrite Hf. reflexivity.
Qed.
