(** Small list and arithmetic helpers shared by every other file. *)
From Coq Require Import List Arith Lia Bool.
Import ListNotations.

(** Product of a list of naturals. *)
Definition prod (l : list nat) : nat := fold_right Nat.mul 1 l.

Lemma prod_app : forall l1 l2, prod (l1 ++ l2) = prod l1 * prod l2.
Proof. induction l1; intros; simpl; [lia|]. rewrite IHl1. lia. Qed.

Lemma prod_pos : forall l, (forall x, In x l -> 0 < x) -> 0 < prod l.
Proof.
  induction l; intros H; simpl; [lia|].
  assert (0 < a) by (apply H; simpl; auto).
  assert (0 < prod l) by (apply IHl; intros; apply H; simpl; auto). nia.
Qed.

(** Point update of a function on [nat]. *)
Definition upd {A} (f : nat -> A) (a : nat) (v : A) : nat -> A :=
  fun b => if Nat.eqb b a then v else f b.

Lemma upd_eq : forall A (f : nat -> A) a v, upd f a v a = v.
Proof. intros. unfold upd. now rewrite Nat.eqb_refl. Qed.

Lemma upd_neq : forall A (f : nat -> A) a b v, b <> a -> upd f a v b = f b.
Proof. intros. unfold upd. destruct (Nat.eqb_spec b a); congruence. Qed.

(** Replace the [n]-th element of a list (no-op when out of range). *)
Fixpoint set_nth {A} (l : list A) (n : nat) (x : A) : list A :=
  match l, n with
  | [], _ => []
  | _ :: t, 0 => x :: t
  | h :: t, S n => h :: set_nth t n x
  end.

Lemma set_nth_length : forall A (l : list A) n x, length (set_nth l n x) = length l.
Proof. induction l; destruct n; simpl; auto. Qed.

Lemma nth_error_set_nth_eq : forall A (l : list A) n x,
  n < length l -> nth_error (set_nth l n x) n = Some x.
Proof. induction l; destruct n; simpl; intros; try lia; auto. apply IHl. lia. Qed.

Lemma nth_error_set_nth_neq : forall A (l : list A) n k x,
  k <> n -> nth_error (set_nth l n x) k = nth_error l k.
Proof.
  induction l; destruct n, k; simpl; intros; auto; try congruence.
Qed.

Lemma map_set_nth : forall A B (f : A -> B) l n x,
  map f (set_nth l n x) = set_nth (map f l) n (f x).
Proof. induction l; destruct n; simpl; intros; f_equal; auto. Qed.

Lemma set_nth_same : forall A (l : list A) n x,
  nth_error l n = Some x -> set_nth l n x = l.
Proof. induction l; destruct n; simpl; intros; try congruence; f_equal; auto. Qed.

(** Boolean list equality and duplicate freedom on naturals. *)
Definition nat_list_eqb (a b : list nat) : bool :=
  if list_eq_dec Nat.eq_dec a b then true else false.

Lemma nat_list_eqb_spec : forall a b, nat_list_eqb a b = true <-> a = b.
Proof. intros. unfold nat_list_eqb. destruct (list_eq_dec Nat.eq_dec a b); split; congruence. Qed.

Definition memb (x : nat) (l : list nat) : bool := existsb (Nat.eqb x) l.

Lemma memb_spec : forall x l, memb x l = true <-> In x l.
Proof.
  intros. unfold memb. rewrite existsb_exists. split.
  - intros [y [Hy Heq]]. apply Nat.eqb_eq in Heq. subst. auto.
  - intros H. exists x. split; auto. apply Nat.eqb_refl.
Qed.

Fixpoint nodupb (l : list nat) : bool :=
  match l with
  | [] => true
  | x :: t => negb (memb x t) && nodupb t
  end.

Lemma nodupb_spec : forall l, nodupb l = true <-> NoDup l.
Proof.
  induction l; simpl.
  - split; auto. constructor.
  - rewrite andb_true_iff, negb_true_iff, IHl. split.
    + intros [H1 H2]. constructor; auto. intro Hin. apply memb_spec in Hin. congruence.
    + intros H. inversion H; subst. split; auto.
      destruct (memb a l) eqn:E; auto. apply memb_spec in E. contradiction.
Qed.

(** Results of executable functions that can fail with a reason. *)
Inductive result (E A : Type) : Type :=
| Ok : A -> result E A
| Err : E -> result E A.
Arguments Ok {E A} _.
Arguments Err {E A} _.

(** Helpers for reasoning about [set_nth] and duplicate freedom. *)
Lemma set_nth_app_mid : forall A (L R : list A) x y,
  set_nth (L ++ x :: R) (length L) y = L ++ y :: R.
Proof. induction L; simpl; intros; f_equal; auto. Qed.

Lemma Forall_set_nth : forall A (P : A -> Prop) l n x,
  Forall P l -> P x -> Forall P (set_nth l n x).
Proof.
  induction l; destruct n; simpl; intros x HF Hx; inversion HF; subst; constructor; auto.
Qed.

Lemma nodup_app_r : forall A (l l' : list A), NoDup (l ++ l') -> NoDup l'.
Proof. induction l; simpl; intros l' H; auto. inversion H; auto. Qed.

Lemma nodup_app_intro : forall A (l l' : list A),
  NoDup l -> NoDup l' -> (forall x, In x l -> ~ In x l') -> NoDup (l ++ l').
Proof.
  induction l as [|a l IH]; simpl; intros l' H1 H2 H3; auto.
  inversion H1; subst. constructor.
  - rewrite in_app_iff. intros [H|H]; [contradiction|]. apply (H3 a); auto.
  - apply IH; auto.
Qed.

Lemma find_none_intro : forall A (f : A -> bool) l,
  (forall x, In x l -> f x = false) -> find f l = None.
Proof.
  induction l as [|a l IH]; simpl; intros H; auto.
  rewrite H by auto. apply IH. intros; apply H; auto.
Qed.

Lemma last_indep : forall A (l : list A) d d', l <> [] -> last l d = last l d'.
Proof.
  induction l as [|a l IH]; intros d d' H; [congruence|].
  destruct l as [|b l]; auto. simpl. apply IH. discriminate.
Qed.

Lemma last_cons_ne : forall A (x d : A) l, l <> [] -> last (x :: l) d = last l d.
Proof. intros A x d l H. destruct l; [congruence|reflexivity]. Qed.
