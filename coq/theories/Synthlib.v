(** Facts about the synthesizer's helpers ([Synth.v]): counts of axes by
    size ([cnt]), dimension functions ([allax], [tyof]), [first_some] and
    [pairs]. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types Checker Synth.
Import ListNotations.

(** * Counting axes by size: [cnt] *)

Lemma cnt_filter : forall m v l, cnt m v l = length (filter (fun a => asize m a =? v) l).
Proof. induction l as [|a l IH]; simpl; auto. destruct (asize m a =? v); simpl; auto. Qed.

Lemma cnt_app : forall m v l1 l2, cnt m v (l1 ++ l2) = cnt m v l1 + cnt m v l2.
Proof. intros. rewrite !cnt_filter. now rewrite filter_app, app_length. Qed.

Lemma cnt_cons : forall m v a l, cnt m v (a :: l) = (if asize m a =? v then 1 else 0) + cnt m v l.
Proof. intros. simpl. destruct (asize m a =? v); reflexivity. Qed.

Lemma cnt_single : forall m v a, cnt m v [a] = if asize m a =? v then 1 else 0.
Proof. intros. rewrite cnt_cons. simpl. lia. Qed.

Lemma cnt_perm : forall m v l l', Permutation l l' -> cnt m v l = cnt m v l'.
Proof.
  intros m v l l' H. induction H; rewrite ?cnt_cons; try lia.
Qed.

Lemma cnt_pos_in : forall m v l, 0 < cnt m v l -> exists a, In a l /\ asize m a = v.
Proof.
  induction l as [|a l IH]; intros H; [simpl in H; lia|].
  rewrite cnt_cons in H. destruct (Nat.eqb_spec (asize m a) v).
  - exists a. simpl. auto.
  - destruct (IH H) as [b [Hb Hv]]. exists b. simpl. auto.
Qed.

Lemma cnt_nodup_incl : forall m v l l', NoDup l -> incl l l' -> cnt m v l <= cnt m v l'.
Proof.
  intros. rewrite !cnt_filter. apply NoDup_incl_length.
  - apply NoDup_filter; auto.
  - intros x Hx. apply filter_In in Hx. apply filter_In. destruct Hx. split; auto.
Qed.

(** Only the axes of size [v] matter. *)
Lemma cnt_nodup_incl_v : forall m v l l', NoDup l ->
  (forall a, In a l -> asize m a = v -> In a l') -> cnt m v l <= cnt m v l'.
Proof.
  intros. rewrite !cnt_filter. apply NoDup_incl_length.
  - apply NoDup_filter; auto.
  - intros x Hx. apply filter_In in Hx. apply filter_In. destruct Hx as [H1 H2].
    apply Nat.eqb_eq in H2. split; auto. apply Nat.eqb_eq; auto.
Qed.

Lemma cnt_le_length : forall m v l, cnt m v l <= length l.
Proof. intros. rewrite cnt_filter. induction l; simpl; auto. destruct (asize m a =? v); simpl; lia. Qed.

(** Equal counts of every size give equal products. *)
Lemma nprod_cnt_eq : forall m l l', (forall v, cnt m v l = cnt m v l') -> nprod m l = nprod m l'.
Proof.
  intros m l. induction l as [|a l IH]; intros l' H.
  - destruct l' as [|b l']; auto. specialize (H (asize m b)). rewrite cnt_cons, Nat.eqb_refl in H.
    simpl in H. lia.
  - assert (Hp : 0 < cnt m (asize m a) l') by (rewrite <- H, cnt_cons, Nat.eqb_refl; lia).
    destruct (cnt_pos_in _ _ _ Hp) as [b [Hb Hv]].
    destruct (in_split _ _ Hb) as [l1 [l2 ->]].
    rewrite (nprod_perm m (l1 ++ b :: l2) (b :: l1 ++ l2)) by (symmetry; apply Permutation_middle).
    rewrite !nprod_cons, Hv. f_equal. apply IH. intros v. specialize (H v).
    rewrite cnt_cons in H. rewrite (cnt_perm m v (l1 ++ b :: l2) (b :: l1 ++ l2)) in H
      by (symmetry; apply Permutation_middle).
    rewrite cnt_cons, Hv in H. lia.
Qed.

Lemma cnt_cntv : forall m v L, cnt m v L = cntv v (map (asize m) L).
Proof.
  intros m v L. rewrite cnt_filter. unfold cntv. induction L as [|a L IH]; simpl; auto.
  destruct (asize m a =? v); simpl; auto.
Qed.

(** * [first_some] *)

Lemma first_some_none : forall {A B} (f : A -> option B) l, first_some f l = None -> forall x, In x l -> f x = None.
Proof.
  induction l as [|y l IH]; simpl; intros H x Hx; [contradiction|].
  destruct (f y) eqn:E; [discriminate|]. destruct Hx as [<-|Hx]; auto.
Qed.

Lemma first_some_some : forall {A B} (f : A -> option B) l z, first_some f l = Some z ->
  exists x, In x l /\ f x = Some z.
Proof.
  induction l as [|y l IH]; simpl; intros z H; [discriminate|].
  destruct (f y) eqn:E.
  - inversion H; subst. eauto.
  - destruct (IH z H) as [x [Hx Hf]]. eauto.
Qed.

(** * Dimension functions: [allax] *)

Lemma in_allax : forall r f a, In a (allax r f) <-> exists d, d < r /\ In a (f d).
Proof.
  intros. unfold allax. rewrite in_flat_map. split.
  - intros [d [Hd Ha]]. apply in_seq in Hd. exists d. split; [lia|auto].
  - intros [d [Hd Ha]]. exists d. split; auto. apply in_seq. lia.
Qed.

Lemma allax_ext : forall r f g, (forall d, d < r -> f d = g d) -> allax r f = allax r g.
Proof.
  intros r f g H. unfold allax.
  assert (Hfm : forall l, (forall x, In x l -> f x = g x) -> flat_map f l = flat_map g l).
  { induction l as [|x l IH]; simpl; intros Hl; auto. rewrite Hl, IH; auto. }
  apply Hfm. intros x Hx. apply in_seq in Hx. apply H. lia.
Qed.

Lemma allax_S : forall r f, allax (S r) f = allax r f ++ f r.
Proof. intros. unfold allax. rewrite seq_S, flat_map_app. simpl. now rewrite app_nil_r. Qed.

Lemma allax_nil : forall r, allax r (fun _ => []) = [].
Proof. intros. unfold allax. generalize (seq 0 r) as l. induction l as [|d l IH]; simpl; auto. Qed.

Lemma allax_upd_perm : forall r f d l, d < r ->
  Permutation (allax r (upd f d l)) (l ++ allax r (upd f d [])).
Proof.
  induction r as [|r IH]; intros f d l Hd; [lia|]. rewrite !allax_S.
  destruct (Nat.eq_dec d r) as [->|Hne].
  - rewrite !upd_eq, app_nil_r.
    rewrite (allax_ext r (upd f r l) (upd f r [])) by (intros; rewrite !upd_neq by lia; auto).
    apply Permutation_app_comm.
  - rewrite !upd_neq by lia. rewrite app_assoc. apply Permutation_app_tail. apply IH. lia.
Qed.

Lemma allax_perm_split : forall r f d, d < r -> Permutation (allax r f) (f d ++ allax r (upd f d [])).
Proof.
  intros. rewrite <- (allax_ext r (upd f d (f d)) f) by (intros; unfold upd; destruct (Nat.eqb_spec d0 d); subst; auto).
  apply allax_upd_perm; auto.
Qed.

Lemma allax_upd_perm' : forall r f d l, d < r -> Permutation l (f d) ->
  Permutation (allax r (upd f d l)) (allax r f).
Proof.
  intros. rewrite allax_upd_perm by auto. rewrite (allax_perm_split r f d) by auto.
  apply Permutation_app_tail; auto.
Qed.

Lemma allax_upd_app : forall r f d l, d < r ->
  Permutation (allax r (upd f d (f d ++ l))) (l ++ allax r f).
Proof.
  intros. rewrite allax_upd_perm by auto. rewrite (allax_perm_split r f d) by auto.
  rewrite !app_assoc. apply Permutation_app_tail. apply Permutation_app_comm.
Qed.

Lemma allax_cat : forall r f g, Permutation (allax r (fun d => f d ++ g d)) (allax r f ++ allax r g).
Proof.
  induction r as [|r IH]; intros; simpl; auto. rewrite !allax_S.
  rewrite IH. rewrite <- !app_assoc. apply Permutation_app_head.
  rewrite !app_assoc. apply Permutation_app_tail. apply Permutation_app_comm.
Qed.

Lemma allax_nodup_dim : forall r f d, NoDup (allax r f) -> d < r -> NoDup (f d).
Proof.
  intros r f d H Hd. apply (Permutation_NoDup (allax_perm_split r f d Hd)) in H.
  eapply nodup_app_l; eauto.
Qed.

Lemma allax_nodup_disj : forall r f d d' a, NoDup (allax r f) -> d < r -> d' < r ->
  In a (f d) -> In a (f d') -> d = d'.
Proof.
  intros r f d d' a H Hd Hd' Ha Ha'. destruct (Nat.eq_dec d d') as [|Hne]; auto. exfalso.
  apply (Permutation_NoDup (allax_perm_split r f d Hd)) in H.
  apply (nodup_app_disj _ _ _ a H Ha). apply in_allax. exists d'. split; auto.
  rewrite upd_neq by auto. auto.
Qed.

(** Growing one dimension keeps what was there. *)
Lemma upd_app_in : forall r f d l a, In a (allax r f) -> In a (allax r (upd f d (f d ++ l))).
Proof.
  intros r f d l a H. apply in_allax in H. destruct H as [d' [Hd' Ha]]. apply in_allax.
  exists d'. split; auto. unfold upd. destruct (Nat.eqb_spec d' d); subst; auto. apply in_or_app; auto.
Qed.

(** Counting over all dimensions. *)

(** Counting over all dimensions. *)
Lemma cnt_allax_le : forall m v r f g, (forall d, d < r -> cnt m v (f d) <= cnt m v (g d)) ->
  cnt m v (allax r f) <= cnt m v (allax r g).
Proof.
  induction r as [|r IH]; intros f g H; simpl; auto. rewrite !allax_S, !cnt_app.
  assert (cnt m v (allax r f) <= cnt m v (allax r g)) by (apply IH; auto).
  specialize (H r). lia.
Qed.

Lemma cnt_allax_lt : forall m v r f g, (forall d, d < r -> cnt m v (f d) <= cnt m v (g d)) ->
  (exists d, d < r /\ cnt m v (f d) < cnt m v (g d)) ->
  cnt m v (allax r f) < cnt m v (allax r g).
Proof.
  induction r as [|r IH]; intros f g H [d [Hd Hlt]]; [lia|]. rewrite !allax_S, !cnt_app.
  destruct (Nat.eq_dec d r) as [->|Hne].
  - assert (cnt m v (allax r f) <= cnt m v (allax r g)) by (apply cnt_allax_le; auto). lia.
  - assert (cnt m v (allax r f) < cnt m v (allax r g)) by (apply IH; eauto; exists d; split; auto; lia).
    specialize (H r). lia.
Qed.

Lemma cnt_allax_cat : forall m v r f g,
  cnt m v (allax r (fun d => f d ++ g d)) = cnt m v (allax r f) + cnt m v (allax r g).
Proof. intros. rewrite (cnt_perm _ _ _ _ (allax_cat r f g)). apply cnt_app. Qed.

Lemma cnt_allax_sum : forall m v r f,
  cnt m v (allax r f) = fold_right plus 0 (map (fun e => cnt m v (f e)) (seq 0 r)).
Proof.
  induction r as [|r IH]; intros f; auto. rewrite allax_S, seq_S, map_app, cnt_app, IH.
  rewrite fold_plus_app. simpl. lia.
Qed.

Lemma upd_app_cnt : forall m v f d l d', cnt m v (f d') <= cnt m v (upd f d (f d ++ l) d').
Proof.
  intros. unfold upd. destruct (Nat.eqb_spec d' d); subst; auto. rewrite cnt_app. lia.
Qed.

(** * Types built from dimension functions *)

Lemma tyof_from_map : forall t f k,
  tyof_from t f k = map (fun d => mkdim (f (k + d)) (gs t d)) (seq 0 (length t)).
Proof.
  induction t as [|D t IH]; intros f k; [reflexivity|].
  cbn [tyof_from length seq map]. rewrite <- seq_shift, map_map. f_equal.
  - rewrite Nat.add_0_r. reflexivity.
  - rewrite IH. apply map_ext. intros d. rewrite Nat.add_succ_r. reflexivity.
Qed.

Lemma tyof_map : forall t f, tyof t f = map (fun d => mkdim (f d) (gs t d)) (seq 0 (length t)).
Proof. intros. unfold tyof. rewrite tyof_from_map. reflexivity. Qed.

Lemma tyof_length : forall t f, length (tyof t f) = length t.
Proof. intros. rewrite tyof_map. now rewrite map_length, seq_length. Qed.

Lemma nth_error_tyof : forall t f d, d < length t -> nth_error (tyof t f) d = Some (mkdim (f d) (gs t d)).
Proof. intros. rewrite tyof_map. rewrite nth_error_map, nth_error_seq0; auto. Qed.

Lemma tyof_ext : forall t f g, (forall d, d < length t -> f d = g d) -> tyof t f = tyof t g.
Proof.
  intros t f g H. rewrite !tyof_map. apply map_ext_in. intros d Hd. apply in_seq in Hd.
  rewrite H by lia. auto.
Qed.

Lemma set_nth_tyof : forall t f d l, d < length t ->
  set_nth (tyof t f) d (mkdim l (gs t d)) = tyof t (upd f d l).
Proof.
  intros. rewrite !tyof_map. rewrite set_nth_map_seq by auto.
  apply map_ext. intros k. simpl. unfold upd. destruct (Nat.eqb_spec k d); subst; auto.
Qed.

Lemma used_tyof : forall t f, used (tyof t f) = allax (length t) f.
Proof.
  intros. rewrite tyof_map. unfold used, allax. generalize (seq 0 (length t)) as l.
  induction l as [|d l IH]; simpl; auto. now rewrite IH.
Qed.

Lemma tyof_self : forall t, tyof t (sax t) = t.
Proof.
  intros t. rewrite tyof_map. unfold sax, gs.
  transitivity (map (fun d => nth d t dd0) (seq 0 (length t))); [|apply map_nth_seq].
  apply map_ext. intros d. destruct (nth d t dd0); auto.
Qed.

Lemma used_src : forall src, used src = allax (length src) (sax src).
Proof. intros. rewrite <- (tyof_self src) at 1. apply used_tyof. Qed.

Lemma map_gsize_tyof : forall t f, map gsize (tyof t f) = map gsize t.
Proof.
  intros t f. transitivity (map gsize (tyof t (sax t))); [|now rewrite tyof_self].
  rewrite !tyof_map. rewrite !map_map. auto.
Qed.

Lemma same_axes_tyof : forall t C T, same_axes (length t) C T = atype_eqb (tyof t C) (tyof t T).
Proof.
  intros t C T. unfold same_axes. destruct (atype_eqb (tyof t C) (tyof t T)) eqn:E.
  - apply atype_eqb_spec in E. apply forallb_forall. intros d Hd. apply in_seq in Hd.
    apply nat_list_eqb_spec.
    assert (H := f_equal (fun u => nth_error u d) E). cbv beta in H.
    rewrite !nth_error_tyof in H by lia. congruence.
  - destruct (forallb _ _) eqn:F; auto. rewrite forallb_forall in F.
    rewrite <- E. symmetry. apply atype_eqb_spec. apply tyof_ext. intros d Hd.
    apply nat_list_eqb_spec, F, in_seq. lia.
Qed.

Lemma gs_map : forall t t', map gsize t = map gsize t' -> forall d, gs t d = gs t' d.
Proof.
  intros t t' H d. unfold gs. rewrite <- (map_nth gsize t dd0 d), <- (map_nth gsize t' dd0 d).
  now rewrite H.
Qed.

(** * [pairs] *)

Lemma pairs_in : forall r F l d a, In (d, a) (pairs r F l) -> d < r /\ (In a (F d) \/ In a l).
Proof.
  intros r F l d a H. unfold pairs in H. apply in_app_or in H.
  destruct H as [H|H]; apply in_flat_map in H; destruct H as [d' [Hd' H]];
    apply in_map_iff in H; destruct H as [a' [E Ha]]; inversion E; subst;
    apply in_seq in Hd'; split; auto; lia.
Qed.

Lemma pairs_in2 : forall r F l d a, d < r -> In a l -> In (d, a) (pairs r F l).
Proof.
  intros. unfold pairs. apply in_or_app. right. apply in_flat_map. exists d.
  split; [apply in_seq; lia|]. apply in_map. auto.
Qed.

Lemma pairs_fst : forall r F l p, In p (pairs r F l) -> fst p < r.
Proof. intros r F l [d a] H. apply pairs_in in H. apply H. Qed.

(** [pairs_where] is [pairs] filtered by the axis. *)
Lemma pairs_at_filter : forall keep d l rest,
  pairs_at keep d l rest = filter (fun p => keep (snd p)) (map (pair d) l) ++ rest.
Proof.
  induction l as [|a l IH]; intros rest; simpl; auto.
  destruct (keep a); simpl; rewrite IH; reflexivity.
Qed.

Lemma pairs_over_filter : forall keep F ds rest,
  pairs_over keep F ds rest = filter (fun p => keep (snd p)) (flat_map (fun d => map (pair d) (F d)) ds) ++ rest.
Proof.
  induction ds as [|d ds IH]; intros rest; simpl; auto.
  rewrite pairs_at_filter, IH, filter_app, app_assoc. reflexivity.
Qed.

Lemma filter_true : forall A (l : list A), filter (fun _ => true) l = l.
Proof. induction l as [|x l IH]; simpl; congruence. Qed.

Lemma filter_pairs_map : forall (keep : nat -> bool) (d : nat) l,
  filter (fun p : nat * nat => keep (snd p)) (map (pair d) l) = map (pair d) (filter keep l).
Proof. induction l as [|a l IH]; simpl; auto. destruct (keep a); simpl; congruence. Qed.

Lemma pairs_where_filter : forall keep r F l,
  pairs_where keep r F l = filter (fun p => keep (snd p)) (pairs r F l).
Proof.
  intros. unfold pairs_where, pairs. cbv zeta. rewrite !pairs_over_filter, app_nil_r, filter_app.
  f_equal. rewrite filter_true. generalize (seq 0 r). induction l0 as [|d ds IH]; simpl; auto.
  rewrite filter_app, filter_pairs_map, IH. reflexivity.
Qed.
