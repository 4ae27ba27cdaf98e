(** Commutative monoids and the reduction of a list: what a pending
    (partial) value is waiting for. Sum, max and min are instances; every
    lemma about reductions lives here. *)
From Coq Require Import List Arith Lia Permutation.
From VS Require Import Prelude.
Import ListNotations.

(** A commutative monoid: carrier, operation, unit and the laws. *)
Record cmonoid := mkcmonoid {
  carrier : Type;
  mop : carrier -> carrier -> carrier;
  munit : carrier;
  mop_assoc : forall x y z, mop x (mop y z) = mop (mop x y) z;
  mop_comm : forall x y, mop x y = mop y x;
  mop_unit_l : forall x, mop munit x = x
}.

(** Sum over the naturals. *)
Definition nat_sum : cmonoid := mkcmonoid nat Nat.add 0 Nat.add_assoc Nat.add_comm Nat.add_0_l.

(** Max over the naturals, with unit 0 (DTensor's [Partial("max")] over
    non-negative values). *)
Definition nat_max : cmonoid := mkcmonoid nat Nat.max 0 Nat.max_assoc Nat.max_comm Nat.max_0_l.

(** Min needs a top element as unit: naturals extended by [None] as
    infinity (DTensor's [Partial("min")]). *)
Definition omin (x y : option nat) : option nat :=
  match x, y with
  | None, _ => y
  | _, None => x
  | Some a, Some b => Some (Nat.min a b)
  end.

Lemma omin_assoc : forall x y z, omin x (omin y z) = omin (omin x y) z.
Proof. intros [a|] [b|] [c|]; simpl; auto. f_equal. apply Nat.min_assoc. Qed.

Lemma omin_comm : forall x y, omin x y = omin y x.
Proof. intros [a|] [b|]; simpl; auto. f_equal. apply Nat.min_comm. Qed.

Lemma omin_unit_l : forall x, omin None x = x.
Proof. reflexivity. Qed.

Definition nat_min : cmonoid := mkcmonoid (option nat) omin None omin_assoc omin_comm omin_unit_l.

(** A map injective on [0, n) keeps [seq 0 n] duplicate-free. *)
Lemma seq_injective_nodup : forall (s : nat -> nat) n,
  (forall k1 k2, k1 < n -> k2 < n -> s k1 = s k2 -> k1 = k2) -> NoDup (map s (seq 0 n)).
Proof.
  intros s n Hi. assert (Hg : forall b, (forall k1 k2, b <= k1 < n -> b <= k2 < n -> s k1 = s k2 -> k1 = k2) ->
    NoDup (map s (seq b (n - b)))).
  { intros b. remember (n - b) as len eqn:Hlen. revert b Hlen.
    induction len as [|len IH]; intros b Hlen Hb; simpl; [constructor|].
    constructor.
    - intros Hin. apply in_map_iff in Hin. destruct Hin as [k [Hk Hin]]. apply in_seq in Hin.
      assert (k = b) by (apply Hb; lia). lia.
    - apply IH; [lia|]. intros k1 k2 H1 H2. apply Hb; lia. }
  specialize (Hg 0). rewrite Nat.sub_0_r in Hg. apply Hg. intros k1 k2 H1 H2. apply Hi; lia.
Qed.

(** A sum over [seq s n] as one over [seq 0 n]. *)
Lemma map_seq_shift : forall {A} (g : nat -> A) s n, map g (seq s n) = map (fun r => g (s + r)) (seq 0 n).
Proof.
  intros A g s n. revert g s. induction n as [|n IH]; intros g s; simpl; auto.
  rewrite Nat.add_0_r. f_equal. rewrite IH, (IH _ 1). apply map_ext. intros r. f_equal. lia.
Qed.

Section Reduce.
Context (M : cmonoid).
Local Notation T := (carrier M).
Local Notation "x ** y" := (mop M x y) (at level 40, left associativity).
Local Notation e := (munit M).

Lemma mop_unit_r : forall x, x ** e = x.
Proof. intros x. rewrite mop_comm. apply mop_unit_l. Qed.

(** Exchange of the middle terms. *)
Lemma mop_swap4 : forall a b c d, (a ** b) ** (c ** d) = (a ** c) ** (b ** d).
Proof.
  intros a b c d. rewrite <- !mop_assoc. f_equal. rewrite !mop_assoc. f_equal. apply mop_comm.
Qed.

(** The reduction of a list. *)
Definition msum (l : list T) : T := fold_right (mop M) e l.

Lemma msum_nil : msum [] = e.
Proof. reflexivity. Qed.

Lemma msum_cons : forall x l, msum (x :: l) = x ** msum l.
Proof. reflexivity. Qed.

Lemma msum_single : forall x, msum [x] = x.
Proof. intros x. apply mop_unit_r. Qed.

(** Sum over a concatenation. *)
Lemma msum_app : forall l1 l2, msum (l1 ++ l2) = msum l1 ** msum l2.
Proof.
  induction l1 as [|x l1 IH]; intros l2; simpl.
  - symmetry. apply mop_unit_l.
  - fold (msum (l1 ++ l2)) (msum l1). rewrite IH. apply mop_assoc.
Qed.

(** Invariance under permutation. *)
Lemma msum_perm : forall l l', Permutation l l' -> msum l = msum l'.
Proof.
  intros l l' H. induction H as [|x l l' H IH|x y l|l l' l'' H1 IH1 H2 IH2]; simpl; auto.
  - fold (msum l) (msum l'). now rewrite IH.
  - fold (msum l). rewrite !mop_assoc. f_equal. apply mop_comm.
  - congruence.
Qed.

(** Sums of pointwise-equal terms are equal. *)
Lemma msum_ext : forall {A} (f g : A -> T) l, (forall x, In x l -> f x = g x) ->
  msum (map f l) = msum (map g l).
Proof. intros A f g l H. f_equal. apply map_ext_in. exact H. Qed.

(** A sum of units is the unit. *)
Lemma msum_units : forall l, (forall x, In x l -> x = e) -> msum l = e.
Proof.
  induction l as [|x l IH]; intros H; simpl; auto. fold (msum l).
  rewrite (H x (or_introl eq_refl)), IH by (intros; apply H; simpl; auto). apply mop_unit_l.
Qed.

(** The sum of two sums term by term. *)
Lemma msum_map_op : forall {A} (f g : A -> T) l,
  msum (map (fun x => f x ** g x) l) = msum (map f l) ** msum (map g l).
Proof.
  intros A f g. induction l as [|x l IH]; simpl.
  - symmetry. apply mop_unit_l.
  - fold (msum (map (fun x => f x ** g x) l)) (msum (map f l)) (msum (map g l)).
    rewrite IH. apply mop_swap4.
Qed.

(** Sum over a flattening: the sum of the partial sums. *)
Lemma msum_flat_map : forall {A} (f : A -> list T) l,
  msum (flat_map f l) = msum (map (fun x => msum (f x)) l).
Proof.
  intros A f. induction l as [|x l IH]; simpl; auto.
  rewrite msum_app, IH. reflexivity.
Qed.

(** Exchanging the order of a double sum. *)
Lemma msum_swap : forall {A B} (F : A -> B -> T) la lb,
  msum (map (fun a => msum (map (F a) lb)) la) = msum (map (fun b => msum (map (fun a => F a b) la)) lb).
Proof.
  intros A B F. induction la as [|a la IH]; intros lb; simpl.
  - symmetry. apply msum_units. intros x Hx. apply in_map_iff in Hx.
    destruct Hx as [b [<- _]]. reflexivity.
  - fold (msum (map (fun a => msum (map (F a) lb)) la)). rewrite IH.
    rewrite <- msum_map_op. reflexivity.
Qed.

(** Sum over [0, a * b), split into [a] runs of [b]. *)
Lemma msum_seq_mul : forall (g : nat -> T) a b,
  msum (map g (seq 0 (a * b))) = msum (map (fun q => msum (map (fun r => g (q * b + r)) (seq 0 b))) (seq 0 a)).
Proof.
  intros g a b. induction a as [|a IH]; [reflexivity|].
  rewrite Nat.mul_succ_l, seq_app, map_app, msum_app, IH, seq_S, map_app, msum_app.
  cbn [map]. rewrite msum_single. f_equal. rewrite map_seq_shift. reflexivity.
Qed.

(** A sum over [0, n) whose terms vanish beyond the first is its first term. *)
Lemma msum_seq_first : forall (g : nat -> T) n, 0 < n -> (forall k, 0 < k < n -> g k = e) ->
  msum (map g (seq 0 n)) = g 0.
Proof.
  intros g n Hn H. destruct n as [|n]; [lia|]. simpl. fold (msum (map g (seq 1 n))).
  rewrite msum_units; [apply mop_unit_r|]. intros x Hx. apply in_map_iff in Hx.
  destruct Hx as [k [<- Hk]]. apply in_seq in Hk. apply H. lia.
Qed.

(** Sum over the image of a list by a map that permutes it. *)
Lemma msum_map_perm : forall {A} (g : A -> T) (s : A -> A) l,
  Permutation (map s l) l -> msum (map (fun x => g (s x)) l) = msum (map g l).
Proof.
  intros A g s l H. rewrite <- (map_map s g). apply msum_perm, Permutation_map, H.
Qed.

(** Reindexing a sum over [0, n) by a bijection of [0, n). *)
Lemma msum_reindex : forall (g : nat -> T) (s : nat -> nat) n,
  (forall k, k < n -> s k < n) ->
  (forall k1 k2, k1 < n -> k2 < n -> s k1 = s k2 -> k1 = k2) ->
  msum (map (fun k => g (s k)) (seq 0 n)) = msum (map g (seq 0 n)).
Proof.
  intros g s n Hr Hi. apply msum_map_perm. apply NoDup_Permutation_bis.
  - apply seq_injective_nodup; auto.
  - rewrite map_length. lia.
  - intros x Hx. apply in_map_iff in Hx. destruct Hx as [k [<- Hk]]. apply in_seq in Hk.
    apply in_seq. specialize (Hr k). lia.
Qed.

End Reduce.

