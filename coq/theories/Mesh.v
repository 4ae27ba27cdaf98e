(** Meshes, devices and mixed-radix numbering of devices along axes. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude.
Import ListNotations.

(** A mesh is the flat list of its (sub-)axis sizes; axes are their indices.
    A sub-axis is simply one more entry: splitting [y:4] into [y.0:2; y.1:2]
    keeps the row-major rank of every device. *)
Definition mesh := list nat.

(** The size of axis [a] ([1] past the end): [nth a m 1] ([asize_nth]),
    by a loop that counts up to [a] (the planner reads axis sizes
    constantly). *)
Fixpoint nth_from (l : list nat) (i a : nat) : nat :=
  match l with
  | [] => 1
  | x :: l' => if i =? a then x else nth_from l' (S i) a
  end.

Definition asize (m : mesh) (a : nat) : nat := nth_from m 0 a.

Lemma nth_from_nth : forall l i a, i <= a -> nth_from l i a = nth (a - i) l 1.
Proof.
  induction l as [|x l IH]; intros i a Hi; simpl.
  - destruct (a - i); reflexivity.
  - destruct (Nat.eqb_spec i a) as [->|Hne].
    + rewrite Nat.sub_diag. reflexivity.
    + rewrite IH by lia. replace (a - i) with (S (a - S i)) by lia. reflexivity.
Qed.

Lemma asize_nth : forall m a, asize m a = nth a m 1.
Proof. intros. unfold asize. rewrite nth_from_nth by lia. now rewrite Nat.sub_0_r. Qed.

Arguments asize : simpl never.

Definition wf_mesh (m : mesh) : Prop := forall a, a < length m -> 0 < asize m a.

Definition wf_meshb (m : mesh) : bool := forallb (fun n => 0 <? n) m.

Lemma wf_meshb_spec : forall m, wf_meshb m = true <-> wf_mesh m.
Proof.
  intros m. unfold wf_meshb, wf_mesh. setoid_rewrite asize_nth. rewrite forallb_forall. split.
  - intros H a Ha. apply Nat.ltb_lt, H, nth_In; auto.
  - intros H x Hx. apply In_nth with (d := 1) in Hx. destruct Hx as [a [Ha Heq]].
    subst. apply Nat.ltb_lt, H; auto.
Qed.

(** Product of the sizes of a list of axes: the size of the group they
    span. By recursion on the list (no intermediate list of sizes: the
    planner computes it constantly); [nprod_prod] states it as the product
    of the sizes. *)
Fixpoint nprod (m : mesh) (A : list nat) : nat :=
  match A with
  | [] => 1
  | a :: A' => asize m a * nprod m A'
  end.

(* Proofs go through [nprod_cons], [nprod_app], [nprod_prod]. *)
Arguments nprod : simpl never.

Lemma nprod_prod : forall m A, nprod m A = prod (map (asize m) A).
Proof. intros m A. induction A as [|a A IH]; [reflexivity|]. change (asize m a * nprod m A = prod (map (asize m) (a :: A))). rewrite IH. reflexivity. Qed.

Lemma nprod_app : forall m A B, nprod m (A ++ B) = nprod m A * nprod m B.
Proof. intros. rewrite !nprod_prod. now rewrite map_app, prod_app. Qed.

Lemma nprod_pos : forall m A, wf_mesh m -> (forall a, In a A -> a < length m) -> 0 < nprod m A.
Proof.
  intros m A Hm HA. rewrite nprod_prod. apply prod_pos. intros x Hx.
  apply in_map_iff in Hx. destruct Hx as [a [<- Ha]]. apply Hm, HA, Ha.
Qed.

Lemma nprod_cons : forall m a A, nprod m (a :: A) = asize m a * nprod m A.
Proof. reflexivity. Qed.

Lemma nprod_perm : forall m A B, Permutation A B -> nprod m A = nprod m B.
Proof. intros. rewrite !nprod_prod. apply prod_perm, Permutation_map; auto. Qed.

(** A device is given by its coordinate on every axis. *)
Definition coords := nat -> nat.

Definition valid (m : mesh) (c : coords) : Prop := forall a, a < length m -> c a < asize m a.

(** Mixed-radix number of a device's coordinates on axes [A], major first:
    the spec's block index. *)
Definition mr (m : mesh) (A : list nat) (c : coords) : nat :=
  fold_left (fun acc a => acc * asize m a + c a) A 0.

Lemma mr_fold_shift : forall m A c x,
  fold_left (fun acc a => acc * asize m a + c a) A x = x * nprod m A + mr m A c.
Proof.
  intros m A c. induction A as [|b A IH]; intros x.
  - unfold mr, nprod. simpl. lia.
  - unfold mr. cbn [fold_left]. rewrite IH. rewrite (IH (0 * asize m b + c b)).
    change (nprod m (b :: A)) with (asize m b * nprod m A). ring.
Qed.

Lemma nprod_single : forall m a, nprod m [a] = asize m a.
Proof. intros. change (asize m a * 1 = asize m a). lia. Qed.

Lemma mr_app : forall m A B c, mr m (A ++ B) c = mr m A c * nprod m B + mr m B c.
Proof. intros. unfold mr at 1. rewrite fold_left_app. apply mr_fold_shift. Qed.

Lemma mr_nil : forall m c, mr m [] c = 0.
Proof. reflexivity. Qed.

Lemma mr_single : forall m a c, mr m [a] c = c a.
Proof. reflexivity. Qed.

Lemma mr_cons : forall m a A c, mr m (a :: A) c = c a * nprod m A + mr m A c.
Proof. intros. apply (mr_app m [a] A). Qed.

Lemma mr_lt : forall m A c, (forall a, In a A -> c a < asize m a) -> mr m A c < nprod m A.
Proof.
  intros m A c. induction A as [|a A IH] using rev_ind; intros H.
  - unfold mr, nprod; simpl; lia.
  - rewrite mr_app, nprod_app, mr_single, nprod_single.
    assert (mr m A c < nprod m A) by (apply IH; intros; apply H, in_or_app; auto).
    assert (c a < asize m a) by (apply H, in_or_app; simpl; auto). nia.
Qed.

Lemma mr_ext : forall m A c c', (forall a, In a A -> c a = c' a) -> mr m A c = mr m A c'.
Proof.
  intros m A c c'. induction A as [|a A IH] using rev_ind; intros H; auto.
  rewrite !mr_app, !mr_single, IH by (intros; apply H, in_or_app; auto).
  rewrite H by (apply in_or_app; simpl; auto). reflexivity.
Qed.

(** Digits of [k] in mixed radix over [A] written into the coordinates of [c]:
    the inverse of [mr] (used to name the [k]-th device of a group). *)
Fixpoint set_digits_rev (m : mesh) (RA : list nat) (c : coords) (k : nat) : coords :=
  match RA with
  | [] => c
  | a :: RA' => set_digits_rev m RA' (upd c a (k mod asize m a)) (k / asize m a)
  end.

Definition set_digits (m : mesh) (A : list nat) (c : coords) (k : nat) : coords :=
  set_digits_rev m (rev A) c k.

Lemma set_digits_app_single : forall m A a c k,
  set_digits m (A ++ [a]) c k = set_digits m A (upd c a (k mod asize m a)) (k / asize m a).
Proof. intros. unfold set_digits. now rewrite rev_app_distr. Qed.

Lemma set_digits_other : forall m A c k b, ~ In b A -> set_digits m A c k b = c b.
Proof.
  intros m A. induction A as [|a A IH] using rev_ind; intros c k b Hb; auto.
  rewrite set_digits_app_single, IH.
  - apply upd_neq. intro; subst. apply Hb, in_or_app; simpl; auto.
  - intro. apply Hb, in_or_app; auto.
Qed.

Lemma set_digits_mr : forall m A c k,
  NoDup A -> (forall a, In a A -> 0 < asize m a) -> k < nprod m A ->
  mr m A (set_digits m A c k) = k.
Proof.
  intros m A. induction A as [|a A IH] using rev_ind; intros c k Hnd Hpos Hk.
  - unfold nprod in Hk. simpl in Hk. unfold mr. simpl. lia.
  - apply NoDup_remove in Hnd. rewrite app_nil_r in Hnd. destruct Hnd as [HndA HnA].
    rewrite set_digits_app_single, mr_app, mr_single.
    assert (Ha : 0 < asize m a) by (apply Hpos, in_or_app; simpl; auto).
    rewrite set_digits_other by auto. rewrite upd_eq.
    rewrite IH; auto.
    + rewrite nprod_single. pose proof (Nat.div_mod k (asize m a)). lia.
    + intros; apply Hpos, in_or_app; auto.
    + rewrite nprod_app, nprod_single in Hk.
      apply Nat.div_lt_upper_bound; lia.
Qed.

Lemma set_digits_valid : forall m A c k,
  wf_mesh m -> valid m c -> valid m (set_digits m A c k).
Proof.
  intros m A. induction A as [|a A IH] using rev_ind; intros c k Hm Hc; auto.
  rewrite set_digits_app_single. apply IH; auto.
  intros b Hb. unfold upd. destruct (Nat.eqb_spec b a); subst.
  - apply Nat.mod_upper_bound. specialize (Hm a Hb). lia.
  - apply Hc; auto.
Qed.

(** Digits are unique: two devices that agree off [A] and have the same
    number on [A] are the same device on [A]. *)
Lemma mr_inj : forall m A c c',
  NoDup A -> (forall a, In a A -> c a < asize m a /\ c' a < asize m a) ->
  mr m A c = mr m A c' -> forall a, In a A -> c a = c' a.
Proof.
  intros m A c c'. induction A as [|b A IH] using rev_ind; intros Hnd Hr Heq a Ha.
  - inversion Ha.
  - apply NoDup_remove in Hnd. rewrite app_nil_r in Hnd. destruct Hnd as [HndA HnA].
    rewrite !mr_app, !mr_single, nprod_single in Heq.
    assert (Hb : c b < asize m b /\ c' b < asize m b) by (apply Hr, in_or_app; simpl; auto).
    assert (Hq : mr m A c = mr m A c' /\ c b = c' b).
    { destruct Hb. 
      assert (E1 : (mr m A c * asize m b + c b) / asize m b = mr m A c)
        by (rewrite Nat.div_add_l by lia; rewrite Nat.div_small; lia).
      assert (E2 : (mr m A c' * asize m b + c' b) / asize m b = mr m A c')
        by (rewrite Nat.div_add_l by lia; rewrite Nat.div_small; lia).
      assert (mr m A c = mr m A c') by (rewrite <- E1, <- E2, Heq; auto).
      split; auto. rewrite H1 in Heq. lia. }
    destruct Hq as [Hq1 Hq2]. apply in_app_or in Ha. destruct Ha as [Ha|Ha].
    + apply IH; auto. intros; apply Hr, in_or_app; auto.
    + destruct Ha as [<-|[]]. auto.
Qed.

(** Row-major ranks: the number of a device over all axes in mesh order. *)
Definition all_axes (m : mesh) : list nat := seq 0 (length m).

Definition ndevices (m : mesh) : nat := prod m.

Definition rank (m : mesh) (c : coords) : nat := mr m (all_axes m) c.

Definition coords_of_rank (m : mesh) (r : nat) : coords := set_digits m (all_axes m) (fun _ => 0) r.

Lemma nprod_all_axes : forall m, nprod m (all_axes m) = ndevices m.
Proof.
  intros m. rewrite nprod_prod. unfold all_axes, ndevices.
  rewrite (map_ext (asize m) (fun a => nth a m 1) (asize_nth m)). f_equal.
  apply nth_ext with (d := 1) (d' := 1); rewrite ?map_length, ?seq_length; auto.
  intros n Hn.
  rewrite nth_indep with (d' := (fun a => nth a m 1) 0) by (rewrite map_length, seq_length; auto).
  rewrite (map_nth (fun a => nth a m 1) (seq 0 (length m)) 0 n), seq_nth; auto.
Qed.

Lemma coords_of_rank_valid : forall m r, wf_mesh m -> valid m (coords_of_rank m r).
Proof.
  intros m r Hm. unfold coords_of_rank. apply set_digits_valid; auto.
Qed.

Lemma rank_coords_of_rank : forall m r, wf_mesh m -> r < ndevices m -> rank m (coords_of_rank m r) = r.
Proof.
  intros m r Hm Hr. unfold rank, coords_of_rank. apply set_digits_mr.
  - apply seq_NoDup.
  - intros a Ha. apply in_seq in Ha. apply Hm. lia.
  - now rewrite nprod_all_axes.
Qed.

Lemma rank_lt : forall m c, valid m c -> rank m c < ndevices m.
Proof.
  intros m c Hc. rewrite <- nprod_all_axes. apply mr_lt. intros a Ha.
  apply in_seq in Ha. apply Hc. lia.
Qed.

Lemma coords_of_rank_rank : forall m c, wf_mesh m -> valid m c ->
  forall a, a < length m -> coords_of_rank m (rank m c) a = c a.
Proof.
  intros m c Hm Hc a Ha. apply (mr_inj m (all_axes m)).
  - apply seq_NoDup.
  - intros b Hb. apply in_seq in Hb. split; [apply coords_of_rank_valid|apply Hc]; auto; lia.
  - apply rank_coords_of_rank; auto. apply rank_lt; auto.
  - apply in_seq. lia.
Qed.
