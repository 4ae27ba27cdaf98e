(** Executing a whole plan by the data semantics: every step rebuilds each
    device's local array by reading through [source], and a well-typed plan
    turns the [src] distribution of any global array into its [dst]
    distribution. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics.
Import ListNotations.

(** One step on a distributed state: the element at local index [i] of device
    [c] is read where [source] says it comes from. *)
Definition exec_step {V} (m : mesh) (t : atype) (op : coll) (t1 : atype)
  (x : coords -> list nat -> V) : coords -> list nat -> V :=
  fun c i => let (c', i') := source m t op t1 c i in x c' i'.

(** A plan runs step by step, the type after each step given by the
    executable rules; a step they reject stops the run (never the case for a
    chain, [exec_chain]). *)
Fixpoint exec {V} (m : mesh) (t : atype) (p : plan) (x : coords -> list nat -> V)
  : coords -> list nat -> V :=
  match p with
  | [] => x
  | op :: p' =>
      match apply m t op with
      | Ok t1 => exec m t1 p' (exec_step m t op t1 x)
      | Err _ => x
      end
  end.

(** Unfolding one step of a chain. *)
Lemma exec_cons_step : forall V m t op t1 p (x : coords -> list nat -> V),
  wf m t -> step m t op t1 -> exec m t (op :: p) x = exec m t1 p (exec_step m t op t1 x).
Proof.
  intros V m t op t1 p x Hwf Hs. cbn [exec]. now rewrite (apply_complete m t op t1 Hwf Hs).
Qed.

(** A state that holds the [t] distribution of [A] wherever it matters
    (valid devices, in-range indices) still does so after a step: [source]
    only reads such places ([source_sound]). *)
Lemma exec_step_agree : forall V (A : list nat -> V) m t op t1 (x : coords -> list nat -> V),
  wf m t -> step m t op t1 ->
  (forall c i, valid m c -> in_range m t i -> x c i = local A m t c i) ->
  forall c i, valid m c -> in_range m t1 i -> exec_step m t op t1 x c i = local A m t1 c i.
Proof.
  intros V A m t op t1 x Hwf Hs Hx c i Hc Hi. unfold exec_step.
  pose proof (source_sound m t op t1 c i Hwf Hs Hc Hi) as Hsrc.
  destruct (source m t op t1 c i) as [c' i']. destruct Hsrc as [Hc' [Hi' Hg]].
  rewrite Hx by auto. unfold local. now rewrite Hg.
Qed.

(** The induction, over any state that agrees with the source distribution. *)
Lemma exec_agree : forall V (A : list nat -> V) m t p t',
  wf m t -> chain m t p t' ->
  forall x : coords -> list nat -> V,
  (forall c i, valid m c -> in_range m t i -> x c i = local A m t c i) ->
  forall c i, valid m c -> in_range m t' i -> exec m t p x c i = local A m t' c i.
Proof.
  intros V A m t p t' Hwf Hch. revert Hwf.
  induction Hch as [t|t op t1 p t' Hs Hch IH]; intros Hwf x Hx c i Hc Hi.
  - cbn [exec]. auto.
  - rewrite (exec_cons_step V m t op t1) by auto. apply IH; auto.
    + eapply step_wf; eauto.
    + apply exec_step_agree; auto.
Qed.

(** A well-typed plan moves the [t] distribution of any global array to its
    [t'] distribution. *)
Theorem exec_correct : forall V (A : list nat -> V) m t p t', wf m t -> chain m t p t' ->
  forall c i, valid m c -> in_range m t' i -> exec m t p (local A m t) c i = local A m t' c i.
Proof.
  intros V A m t p t' Hwf Hch. apply exec_agree; auto.
Qed.

(** Hence every plan the checker accepts moves the data correctly. *)
Corollary check_exec : forall V (A : list nat -> V) m src dst p r, check m src dst p = Ok r ->
  forall c i, valid m c -> in_range m dst i -> exec m src p (local A m src) c i = local A m dst c i.
Proof.
  intros V A m src dst p r Hok.
  assert (Hacc : exists r, check m src dst p = Ok r) by (exists r; exact Hok).
  apply check_accepts_iff_chain in Hacc as [[Hsrc _] Hch].
  apply exec_correct; auto.
Qed.

(** Running a concatenation of plans: the second runs from the type the
    first ends at, on the state the first leaves. *)
Lemma exec_app : forall V m t p1 t1 p2 (x : coords -> list nat -> V),
  wf m t -> chain m t p1 t1 -> exec m t (p1 ++ p2) x = exec m t1 p2 (exec m t p1 x).
Proof.
  intros V m t p1 t1 p2 x Hwf Hch. revert Hwf x.
  induction Hch as [t|t op t' p t1 Hs Hch IH]; intros Hwf x.
  - reflexivity.
  - rewrite <- app_comm_cons, !(exec_cons_step V m t op t') by auto.
    apply IH. eapply step_wf; eauto.
Qed.
