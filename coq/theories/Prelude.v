(** Small list and arithmetic helpers shared by every other file: products,
    point updates, [set_nth], duplicate freedom, sums, folds, primes. *)
From Coq Require Import List Arith Lia Bool Permutation Sorted.
From Coq Require Orders Mergesort FMapAVL OrderedTypeEx FMapFacts.
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

(** Membership, by recursion on the list ([memb_existsb]: [existsb (Nat.eqb x) l]). *)
Fixpoint memb (x : nat) (l : list nat) : bool :=
  match l with
  | [] => false
  | y :: l' => (x =? y) || memb x l'
  end.

Lemma memb_existsb : forall x l, memb x l = existsb (Nat.eqb x) l.
Proof. induction l as [|y l IH]; simpl; congruence. Qed.

Lemma memb_spec : forall x l, memb x l = true <-> In x l.
Proof.
  intros. rewrite memb_existsb, existsb_exists. split.
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

(** [nodupb] in [O(n log n)]: sort, then compare neighbours. [nodupb]
    reads the rest of the list for every element, which for the ranks of
    a mesh of [2^16] devices is [2^31] comparisons. *)
Module NatLeb <: Orders.TotalLeBool.
  Definition t := nat.
  Definition leb := Nat.leb.
  Theorem leb_total : forall a1 a2, leb a1 a2 = true \/ leb a2 a1 = true.
  Proof. intros a b. unfold leb. destruct (Nat.le_ge_cases a b); [left|right]; apply Nat.leb_le; auto. Qed.
End NatLeb.

Module NatLebSort := Mergesort.Sort NatLeb.

Fixpoint adj_distinct (l : list nat) : bool :=
  match l with
  | x :: ((y :: _) as t) => negb (x =? y) && adj_distinct t
  | _ => true
  end.

Definition nodup_fast (l : list nat) : bool := adj_distinct (NatLebSort.sort l).

Lemma adj_distinct_spec : forall l, StronglySorted (fun x y => Nat.leb x y = true) l ->
  adj_distinct l = true <-> NoDup l.
Proof.
  induction l as [|x t IH]; intros Hs; [split; auto; constructor|].
  inversion Hs as [|? ? Ht Hx]; subst. specialize (IH Ht).
  destruct t as [|y t'].
  - simpl. split; auto. intros _. constructor; [auto|constructor].
  - cbn [adj_distinct]. rewrite andb_true_iff, negb_true_iff, IH, Nat.eqb_neq. split.
    + intros [Hxy Hnd]. constructor; auto. intros [E|Hin]; [congruence|].
      inversion Ht as [|? ? _ Hy]; subst. rewrite Forall_forall in Hx, Hy.
      apply Hxy. apply Nat.le_antisymm; apply Nat.leb_le; [apply Hx; left; auto|apply Hy; auto].
    + intros Hnd. inversion Hnd as [|? ? Hni Hnd']; subst. split; auto. intros <-. apply Hni. left; auto.
Qed.

Lemma nodup_fast_spec : forall l, nodup_fast l = true <-> NoDup l.
Proof.
  intros l. unfold nodup_fast. rewrite adj_distinct_spec.
  - pose proof (NatLebSort.Permuted_sort l) as P.
    split; intros H; [exact (Permutation_NoDup (Permutation_sym P) H)|exact (Permutation_NoDup P H)].
  - apply NatLebSort.StronglySorted_sort. intros a b c Hab Hbc. unfold is_true, NatLeb.leb in *.
    apply Nat.leb_le. apply Nat.leb_le in Hab, Hbc. lia.
Qed.

(** [map (fun k => f (nth k l d) k) (seq i n)] with [i = 0]
    ([map_along_nth]) in one pass over [l]: [nth] per index reads [l]
    from its head each time, quadratic in its length. *)
Fixpoint map_along {A B} (d : A) (f : A -> nat -> B) (l : list A) (i n : nat) : list B :=
  match n with
  | 0 => []
  | S n' => f (hd d l) i :: map_along d f (tl l) (S i) n'
  end.

Lemma map_along_from : forall A B d (f : A -> nat -> B) n l i,
  map_along d f l i n = map (fun k => f (nth (k - i) l d) k) (seq i n).
Proof.
  intros A B d f n. induction n as [|n IH]; intros l i; [reflexivity|]. cbn [map_along seq map].
  rewrite Nat.sub_diag, IH. f_equal; [destruct l; reflexivity|].
  apply map_ext_in. intros k Hk. apply in_seq in Hk. replace (k - i) with (S (k - S i)) by lia.
  destruct l; [destruct (k - S i); reflexivity|reflexivity].
Qed.

Lemma map_along_nth : forall A B d (f : A -> nat -> B) l n,
  map_along d f l 0 n = map (fun k => f (nth k l d) k) (seq 0 n).
Proof.
  intros. rewrite map_along_from. apply map_ext. intros k. rewrite Nat.sub_0_r. reflexivity.
Qed.

(** Tables keyed by naturals (AVL trees): what an executable function
    looks up per device or per cell, where a list would be read from its
    head at every lookup. [find_or d k t]: the value at [k], else [d]. *)
Module NatMap := FMapAVL.Make (OrderedTypeEx.Nat_as_OT).
Module NatMapFacts := FMapFacts.WFacts_fun OrderedTypeEx.Nat_as_OT NatMap.

Definition find_or {A} (d : A) (k : nat) (t : NatMap.t A) : A :=
  match NatMap.find k t with Some v => v | None => d end.

Lemma find_or_empty : forall A (d : A) k, find_or d k (NatMap.empty A) = d.
Proof. reflexivity. Qed.

Lemma find_or_add : forall A (d : A) k k' v t,
  find_or d k (NatMap.add k' v t) = if k' =? k then v else find_or d k t.
Proof.
  intros A d k k' v t. unfold find_or. destruct (Nat.eqb_spec k' k) as [E|E].
  - rewrite NatMapFacts.add_eq_o by exact E. reflexivity.
  - rewrite NatMapFacts.add_neq_o by exact E. reflexivity.
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

Lemma nodup_app_l : forall A (l l' : list A), NoDup (l ++ l') -> NoDup l.
Proof.
  induction l as [|x l IH]; simpl; intros l' H; [constructor|].
  inversion H as [|? ? Hx Hnd]; subst. constructor; eauto.
  intro Hin. apply Hx, in_or_app; auto.
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

Lemma nodup_app_disj : forall A (l l' : list A) a, NoDup (l ++ l') -> In a l -> ~ In a l'.
Proof.
  induction l as [|x l IH]; simpl; intros l' a H Ha; [contradiction|].
  inversion H as [|? ? Hx Hnd]; subst.
  destruct Ha as [->|Ha]; eauto. intro Hin. apply Hx, in_or_app; auto.
Qed.

Lemma NoDup_app_inv : forall A (l1 l2 : list A),
  NoDup (l1 ++ l2) -> NoDup l1 /\ NoDup l2 /\ (forall a, In a l1 -> ~ In a l2).
Proof.
  intros A l1 l2 H. split; [eapply nodup_app_l; eauto|]. split; [eapply nodup_app_r; eauto|].
  intros a Ha. eapply nodup_app_disj; eauto.
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

Lemma last_map_f : forall A B (f : A -> B) l d, last (map f l) (f d) = f (last l d).
Proof.
  intros A B f l. induction l as [|x l IH]; intros d; [reflexivity|].
  destruct l as [|y l]; [reflexivity|]. cbn [map]. change (last (f x :: f y :: map f l) (f d)) with (last (f y :: map f l) (f d)).
  change (last (x :: y :: l) d) with (last (y :: l) d). rewrite <- (IH d). reflexivity.
Qed.

(** * More list facts *)

Lemma nth_error_app_len : forall A (P l : list A) x, nth_error (P ++ x :: l) (length P) = Some x.
Proof. intros. rewrite nth_error_app2 by lia. rewrite Nat.sub_diag. reflexivity. Qed.

Lemma app_cons_assoc : forall A (l1 l2 : list A) x, l1 ++ x :: l2 = (l1 ++ [x]) ++ l2.
Proof. intros. rewrite <- app_assoc. reflexivity. Qed.

Lemma last_skipn : forall A (l : list A) k d, k < length l -> last (skipn k l) d = last l d.
Proof.
  induction l as [|a l IH]; intros k d H; simpl in *; [lia|].
  destruct k; simpl; auto. rewrite IH by lia. destruct l; simpl in *; [lia|]. reflexivity.
Qed.

Lemma nth_error_seq0 : forall n d, d < n -> nth_error (seq 0 n) d = Some d.
Proof.
  intros n d H. rewrite nth_error_nth' with (d := 0) by (rewrite seq_length; auto).
  rewrite seq_nth; auto.
Qed.

Lemma set_nth_map_seq : forall {A} n s (h : nat -> A) i x, i < n ->
  set_nth (map h (seq s n)) i x = map (fun k => if k =? s + i then x else h k) (seq s n).
Proof.
  intros A n. induction n as [|n IH]; intros s h i x Hi; [lia|]. simpl.
  destruct i as [|i].
  - rewrite Nat.add_0_r, Nat.eqb_refl. f_equal. apply map_ext_in. intros k Hk.
    apply in_seq in Hk. destruct (Nat.eqb_spec k s); [lia|auto].
  - destruct (Nat.eqb_spec s (s + S i)); [lia|]. f_equal.
    rewrite IH by lia. apply map_ext_in. intros k Hk.
    replace (S s + i) with (s + S i) by lia. auto.
Qed.

Lemma map_nth_seq : forall {A} (l : list A) x, map (fun d => nth d l x) (seq 0 (length l)) = l.
Proof.
  intros A l x. induction l as [|a l IH]; simpl; auto. f_equal.
  rewrite <- seq_shift, map_map. simpl. auto.
Qed.

Lemma nodup_in_range_length : forall k l, NoDup l -> (forall a, In a l -> a < k) -> length l <= k.
Proof.
  intros k l H Hr. rewrite <- (seq_length k 0). apply NoDup_incl_length; auto.
  intros a Ha. apply in_seq. specialize (Hr a Ha). lia.
Qed.

Lemma remove_perm : forall l a, NoDup l -> In a l -> Permutation l (remove Nat.eq_dec a l ++ [a]).
Proof.
  induction l as [|b l IH]; intros a Hnd Ha; [inversion Ha|]. inversion Hnd as [|? ? Hb Hnd']; subst.
  simpl. destruct (Nat.eq_dec a b) as [->|Hne].
  - rewrite notin_remove by auto. apply Permutation_cons_append.
  - destruct Ha as [->|Ha]; [congruence|]. simpl. constructor. auto.
Qed.

Lemma memb_perm : forall a l l', Permutation l l' -> memb a l = memb a l'.
Proof.
  intros a l l' H. destruct (memb a l) eqn:E1, (memb a l') eqn:E2; auto.
  - apply memb_spec in E1. apply (Permutation_in _ H), memb_spec in E1. congruence.
  - apply memb_spec in E2. apply (Permutation_in _ (Permutation_sym H)), memb_spec in E2. congruence.
Qed.

(** Folds that keep an invariant, and folds after which a property holds of
    every element they went through. *)
Lemma fold_inv : forall {A B} (f : A -> B -> A) (I : A -> Prop) (l : list B) x,
  (forall x y, In y l -> I x -> I (f x y)) -> I x -> I (fold_left f l x).
Proof.
  intros A B f I l. induction l as [|y l IH]; simpl; intros x H Hx; [auto|apply IH; auto].
Qed.

Lemma fold_establish : forall {A B} (f : A -> B -> A) (Q : A -> B -> Prop) (l : list B) x,
  (forall x y z, Q x z -> Q (f x y) z) -> (forall x y, In y l -> Q (f x y) y) ->
  forall y, In y l -> Q (fold_left f l x) y.
Proof.
  intros A B f Q l. induction l as [|y l IH]; simpl; intros x Hs He z Hz; [contradiction|].
  destruct Hz as [<-|Hz]; auto.
  apply (fold_inv f (fun x => Q x y)); auto.
Qed.

(** * Sums and products *)

Lemma sum_le : forall {A} (f g : A -> nat) l, (forall x, In x l -> f x <= g x) ->
  fold_right plus 0 (map f l) <= fold_right plus 0 (map g l).
Proof.
  induction l as [|y l IH]; simpl; intros H; auto. pose proof (H y (or_introl eq_refl)).
  assert (fold_right plus 0 (map f l) <= fold_right plus 0 (map g l)) by (apply IH; auto). lia.
Qed.

Lemma sum_lt : forall {A} (f g : A -> nat) l, (forall x, In x l -> f x <= g x) ->
  (exists x, In x l /\ f x < g x) ->
  fold_right plus 0 (map f l) < fold_right plus 0 (map g l).
Proof.
  induction l as [|y l IH]; simpl; intros H [x [Hx Hlt]]; [contradiction|].
  assert (Hy : f y <= g y) by auto.
  assert (Hl : fold_right plus 0 (map f l) <= fold_right plus 0 (map g l)) by (apply sum_le; auto).
  destruct Hx as [<-|Hx]; [lia|].
  assert (fold_right plus 0 (map f l) < fold_right plus 0 (map g l)) by (apply IH; eauto). lia.
Qed.

Lemma sum_bound : forall {A} (f : A -> nat) l k, (forall x, In x l -> f x <= k) ->
  fold_right plus 0 (map f l) <= length l * k.
Proof.
  induction l as [|y l IH]; simpl; intros k H; auto. specialize (IH k).
  assert (f y <= k) by auto. assert (fold_right plus 0 (map f l) <= length l * k) by auto. lia.
Qed.

Lemma fold_plus_In : forall l x, In x l -> x <= fold_right plus 0 l.
Proof. induction l as [|y l IH]; simpl; intros x H; [contradiction|]. destruct H as [<-|H]; [lia|]. specialize (IH x H). lia. Qed.

Lemma fold_plus_app : forall l1 l2, fold_right plus 0 (l1 ++ l2) = fold_right plus 0 l1 + fold_right plus 0 l2.
Proof. induction l1 as [|x l1 IH]; simpl; intros; auto. rewrite IH. lia. Qed.

Lemma prod_perm : forall l l', Permutation l l' -> prod l = prod l'.
Proof. intros l l' H. induction H; simpl; auto; try congruence. ring. Qed.

Lemma prod_set_nth : forall l d x y, nth_error l d = Some y ->
  prod (set_nth l d x) * y = prod l * x.
Proof.
  induction l as [|z l IH]; destruct d; simpl; intros x y H; try discriminate.
  - inversion H; subst. unfold prod; simpl. lia.
  - unfold prod in *; simpl. specialize (IH d x y H). nia.
Qed.

Lemma div_helper : forall a b g, 0 < a -> Nat.divide (a * b) g -> Nat.divide b (g / a).
Proof.
  intros a b g Ha [k Hk]. subst g. exists k.
  replace (k * (a * b)) with ((k * b) * a) by ring. rewrite Nat.div_mul by lia. ring.
Qed.

(** * Primes *)

Definition is_prime (p : nat) : Prop := 1 < p /\ forall k, Nat.divide k p -> k = 1 \/ k = p.

(** Occurrences of [v] in [l]. *)
Definition cntv (v : nat) (l : list nat) : nat := length (filter (fun x => x =? v) l).

Lemma euclid : forall p a b, is_prime p -> Nat.divide p (a * b) -> Nat.divide p a \/ Nat.divide p b.
Proof.
  intros p a b [Hp Hd] H. destruct (Hd (Nat.gcd p a) (Nat.gcd_divide_l p a)) as [E|E].
  - right. apply (Nat.gauss p a b); auto.
  - left. rewrite <- E. apply Nat.gcd_divide_r.
Qed.

Lemma prime_not_div_prod : forall p l, is_prime p ->
  (forall x, In x l -> x <> p /\ (x = 1 \/ is_prime x)) -> ~ Nat.divide p (prod l).
Proof.
  intros p l Hp. induction l as [|x l IH]; intros H Hdiv.
  - unfold prod in Hdiv. simpl in Hdiv. apply Nat.divide_1_r in Hdiv. destruct Hp. lia.
  - unfold prod in Hdiv. simpl in Hdiv. destruct (euclid p x _ Hp Hdiv) as [Hx|Hx].
    + destruct (H x (or_introl eq_refl)) as [Hne [->|[Hx1 Hxd]]].
      * apply Nat.divide_1_r in Hx. destruct Hp. lia.
      * destruct (Hxd p Hx) as [E|E]; [destruct Hp; lia|congruence].
    + apply IH; auto. intros; apply H; simpl; auto.
Qed.

Lemma prod_split_p : forall p l,
  prod l = p ^ cntv p l * prod (filter (fun x => negb (x =? p)) l).
Proof.
  intros p. induction l as [|x l IH]; [reflexivity|]. unfold cntv in *. simpl.
  destruct (Nat.eqb_spec x p); simpl; unfold prod in *; simpl; rewrite IH; subst; ring.
Qed.

Lemma pow_divide_le : forall p a b, a <= b -> Nat.divide (p ^ a) (p ^ b).
Proof.
  intros p a b H. exists (p ^ (b - a)). rewrite <- Nat.pow_add_r. f_equal. lia.
Qed.

(** A product of primes and ones divides [g] when every prime occurs in it at
    most as often as in one of two lists whose products divide [g]. *)
Lemma prime_prod_divide : forall x s t g, (forall e, In e x -> e = 1 \/ is_prime e) ->
  (forall v, cntv v x <= Nat.max (cntv v s) (cntv v t)) ->
  Nat.divide (prod s) g -> Nat.divide (prod t) g -> Nat.divide (prod x) g.
Proof.
  intros x s t g. induction x as [|p x IH]; intros Hx Hc Hs Ht.
  - apply Nat.divide_1_l.
  - assert (IHx : Nat.divide (prod x) g).
    { apply IH; auto; [intros; apply Hx; simpl; auto|]. intros v. specialize (Hc v).
      unfold cntv in *. simpl in Hc. destruct (p =? v); simpl in Hc; lia. }
    unfold prod. simpl. fold (prod x).
    destruct (Hx p (or_introl eq_refl)) as [->|Hp]; [rewrite Nat.mul_1_l; auto|].
    set (c := cntv p (p :: x)).
    assert (Hpc : Nat.divide (p ^ c) g).
    { specialize (Hc p). fold c in Hc.
      destruct (Nat.le_ge_cases (cntv p s) (cntv p t)).
      - apply Nat.divide_trans with (p ^ cntv p t); [apply pow_divide_le; lia|].
        eapply Nat.divide_trans; [|exact Ht]. rewrite (prod_split_p p t). apply Nat.divide_factor_l.
      - apply Nat.divide_trans with (p ^ cntv p s); [apply pow_divide_le; lia|].
        eapply Nat.divide_trans; [|exact Hs]. rewrite (prod_split_p p s). apply Nat.divide_factor_l. }
    assert (Hc1 : c = S (cntv p x)) by (unfold c, cntv; simpl; rewrite Nat.eqb_refl; auto).
    destruct IHx as [k Hk].
    set (y := prod (filter (fun e => negb (e =? p)) x)).
    assert (Hy : ~ Nat.divide p y).
    { apply prime_not_div_prod; auto. intros e He. apply filter_In in He. destruct He as [He Hne].
      apply negb_true_iff, Nat.eqb_neq in Hne. split; auto. apply Hx. simpl; auto. }
    assert (Hxy : prod x = p ^ cntv p x * y) by apply prod_split_p.
    assert (Hpk : Nat.divide p k).
    { rewrite Hc1, Hk, Hxy in Hpc. simpl in Hpc.
      replace (k * (p ^ cntv p x * y)) with (p ^ cntv p x * (y * k)) in Hpc by ring.
      replace (p * p ^ cntv p x) with (p ^ cntv p x * p) in Hpc by ring.
      apply Nat.mul_divide_cancel_l in Hpc.
      - destruct (euclid p y k Hp Hpc); [contradiction|auto].
      - apply Nat.pow_nonzero. destruct Hp. lia. }
    destruct Hpk as [k' Hk']. exists k'. rewrite Hk, Hk'. ring.
Qed.
