(** Every plan the checker accepts makes some device receive at least the
    lower bound of [Traffic.v]: per step, the elements a device receives
    from another device are at most what the checker reports, every element
    of the target that a device did not hold in the source was received at
    some step, and the elements it held are counted by [kept]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Permute Semantics Traffic.
Import ListNotations.

(** * Generic counting lemmas *)

Lemma filter_length_split : forall A (p : A -> bool) l,
  length (filter p l) + length (filter (fun x => negb (p x)) l) = length l.
Proof.
  intros A p l. induction l as [|x l IH]; simpl; auto.
  destruct (p x); simpl; lia.
Qed.

Lemma filter_length_mono : forall A (p q : A -> bool) l,
  (forall x, In x l -> p x = true -> q x = true) ->
  length (filter p l) <= length (filter q l).
Proof.
  intros A p q l. induction l as [|x l IH]; simpl; intros Hpq; auto.
  assert (IH' : length (filter p l) <= length (filter q l)) by (apply IH; auto).
  destruct (p x) eqn:Ep.
  - rewrite (Hpq x (or_introl eq_refl) Ep). simpl. lia.
  - destruct (q x); simpl; lia.
Qed.

Lemma filter_length_cover : forall A (p q : A -> bool) l,
  length (filter p l) <= length (filter q l) + length (filter (fun x => p x && negb (q x)) l).
Proof.
  intros A p q l. induction l as [|x l IH]; simpl; auto.
  destruct (p x), (q x); simpl; lia.
Qed.

Lemma filter_length_none : forall A (p : A -> bool) l,
  (forall x, In x l -> p x = false) -> length (filter p l) = 0.
Proof.
  intros A p l. induction l as [|x l IH]; simpl; intros Hp; auto.
  rewrite (Hp x (or_introl eq_refl)). apply IH. intros y Hy. apply Hp. auto.
Qed.

(** A map injective on a duplicate-free list into another list: the first
    list is no longer. *)
Lemma length_le_inj : forall A B (f : A -> B) (l1 : list A) (l2 : list B),
  NoDup l1 -> (forall x y, In x l1 -> In y l1 -> f x = f y -> x = y) ->
  (forall x, In x l1 -> In (f x) l2) -> length l1 <= length l2.
Proof.
  intros A B f l1 l2 Hnd Hinj Hin. rewrite <- (map_length f l1).
  apply NoDup_incl_length.
  - apply NoDup_map_on; auto.
  - intros y Hy. apply in_map_iff in Hy. destruct Hy as [x [<- Hx]]. apply Hin, Hx.
Qed.

Lemma NoDup_flat_map_disj : forall A B (f : A -> list B) l,
  NoDup l -> (forall x, NoDup (f x)) ->
  (forall x y z, In x l -> In y l -> In z (f x) -> In z (f y) -> x = y) ->
  NoDup (flat_map f l).
Proof.
  intros A B f l. induction l as [|x l IH]; simpl; intros Hnd Hf Hdisj; [constructor|].
  inversion Hnd as [|? ? Hx Hnd']; subst.
  apply nodup_app_intro; [apply Hf| |].
  - apply IH; auto. intros y1 y2 z H1 H2 Hz1 Hz2. apply (Hdisj y1 y2 z); auto.
  - intros z Hz Hz'. apply in_flat_map in Hz'. destruct Hz' as [y [Hy Hzy]].
    assert (Exy : x = y) by (apply (Hdisj x y z); auto). subst y. contradiction.
Qed.

Lemma fold_max_le : forall l b, (forall x, In x l -> x <= b) -> fold_right Nat.max 0 l <= b.
Proof.
  induction l as [|x l IH]; simpl; intros b H; [lia|].
  assert (Hx : x <= b) by auto. assert (Hl : fold_right Nat.max 0 l <= b) by auto. lia.
Qed.

(** Naturals in [[0, n)] whose shift by [s'] lies in [[s, s + l)]. *)
Lemma count_interval : forall s l s' n,
  length (filter (fun k => (s <=? s' + k) && (s' + k <? s + l)) (seq 0 n)) = overlap s l s' n.
Proof.
  intros s l s' n. unfold overlap. induction n as [|n IH].
  - simpl. lia.
  - rewrite seq_S, filter_app, app_length, IH. simpl.
    destruct (Nat.leb_spec s (s' + n)), (Nat.ltb_spec (s' + n) (s + l)); simpl; lia.
Qed.

Lemma div_eq_iff : forall k l r, 0 < l -> (k / l = r <-> r * l <= k < r * l + l).
Proof.
  intros k l r Hl. split.
  - intros <-. pose proof (Nat.div_mod k l) as E. pose proof (Nat.mod_upper_bound k l) as U. nia.
  - intros Hk. symmetry. apply (Nat.div_unique k l r (k - r * l)); lia.
Qed.

(** Among [[0, l * n)], those not in piece [r] (pieces of size [l]). *)
Lemma count_other_piece : forall l n r, 0 < l -> r < n ->
  length (filter (fun k => negb (k / l =? r)) (seq 0 (l * n))) = l * n - l.
Proof.
  intros l n r Hl Hr.
  pose proof (filter_length_split _ (fun k => k / l =? r) (seq 0 (l * n))) as S.
  rewrite seq_length in S.
  assert (E : length (filter (fun k => k / l =? r) (seq 0 (l * n))) = l).
  { rewrite (filter_ext_in (fun k => k / l =? r) (fun k => (r * l <=? 0 + k) && (0 + k <? r * l + l))).
    - rewrite count_interval. unfold overlap. nia.
    - intros k _. simpl. destruct (Nat.eqb_spec (k / l) r) as [E|E].
      + apply div_eq_iff in E; auto. symmetry. apply andb_true_iff.
        rewrite Nat.leb_le, Nat.ltb_lt. lia.
      + symmetry. apply andb_false_iff.
        destruct (Nat.leb_spec (r * l) k), (Nat.ltb_spec k (r * l + l)); auto.
        exfalso. apply E, div_eq_iff; auto. }
  lia.
Qed.

(** * Row-major enumeration of local indices *)

Lemma length_flat_map_cons : forall (L : list (list nat)) ks,
  length (flat_map (fun k => map (cons k) L) ks) = length ks * length L.
Proof.
  intros L ks. induction ks as [|k ks IH]; simpl; auto.
  rewrite app_length, map_length, IH. reflexivity.
Qed.

Lemma row_major_length : forall s, length (row_major s) = prod s.
Proof.
  induction s as [|n s IH]; simpl; auto.
  rewrite length_flat_map_cons, seq_length, IH. reflexivity.
Qed.

Lemma row_major_In : forall s i, In i (row_major s) <-> Forall2 (fun n k => k < n) s i.
Proof.
  induction s as [|n s IH]; intros i; simpl.
  - split.
    + intros [<-|[]]. constructor.
    + intros H. inversion H. auto.
  - rewrite in_flat_map. split.
    + intros [k [Hk Hi]]. apply in_seq in Hk. apply in_map_iff in Hi.
      destruct Hi as [i' [<- Hi']]. constructor; [lia|]. apply IH, Hi'.
    + intros H. inversion H as [|? k ? i' Hk Hi']; subst.
      exists k. split; [apply in_seq; lia|]. apply in_map, IH, Hi'.
Qed.

Lemma row_major_NoDup : forall s, NoDup (row_major s).
Proof.
  induction s as [|n s IH]; simpl.
  - constructor; [intros []|constructor].
  - apply NoDup_flat_map_disj; [apply seq_NoDup| |].
    + intros k. apply NoDup_map_on; auto. intros x y _ _ E. injection E. auto.
    + intros k1 k2 z _ _ H1 H2. apply in_map_iff in H1, H2.
      destruct H1 as [x [<- _]], H2 as [y [E _]]. injection E. auto.
Qed.

(** Filtering a product by a product predicate counts a product. *)
Lemma count_cons_map : forall (f : list nat -> bool) (a : nat -> bool) (b : list nat -> bool) k L,
  (forall i, f (k :: i) = a k && b i) ->
  length (filter f (map (cons k) L)) = if a k then length (filter b L) else 0.
Proof.
  intros f a b k L Hf. induction L as [|i L IH]; simpl.
  - destruct (a k); auto.
  - rewrite Hf. destruct (a k), (b i); simpl; rewrite IH; auto.
Qed.

Lemma count_prod : forall (f : list nat -> bool) (a : nat -> bool) (b : list nat -> bool) ks L,
  (forall k i, f (k :: i) = a k && b i) ->
  length (filter f (flat_map (fun k => map (cons k) L) ks)) = length (filter a ks) * length (filter b L).
Proof.
  intros f a b ks L Hf. induction ks as [|k ks IH]; simpl; auto.
  rewrite filter_app, app_length, IH, (count_cons_map f a b k L (Hf k)).
  destruct (a k); simpl; lia.
Qed.

Lemma filter_true : forall A (l : list A), filter (fun _ => true) l = l.
Proof. intros A l. induction l as [|x l IH]; simpl; congruence. Qed.

(** Filtering by a predicate on one coordinate. *)
Lemma count_coord : forall (p : nat -> bool) s d, d < length s ->
  length (filter (fun i => p (nth d i 0)) (row_major s)) =
  prod (set_nth s d (length (filter p (seq 0 (nth d s 0))))).
Proof.
  intros p s. induction s as [|n s IH]; intros d Hd; simpl in Hd; [lia|].
  destruct d as [|d]; cbn [row_major set_nth nth prod fold_right].
  - rewrite (count_prod _ p (fun _ => true)) by (intros; simpl; rewrite andb_true_r; reflexivity).
    rewrite filter_true, row_major_length. reflexivity.
  - rewrite (count_prod _ (fun _ => true) (fun i => p (nth d i 0))) by (intros; reflexivity).
    rewrite filter_true, seq_length, IH by lia. reflexivity.
Qed.

Lemma set_nth_set_nth : forall A (l : list A) d x y, set_nth (set_nth l d x) d y = set_nth l d y.
Proof. intros A l. induction l as [|z l IH]; intros [|d] x y; simpl; f_equal; auto. Qed.

Lemma nth_map_lsize : forall m t d D, nth_error t d = Some D -> nth d (map (lsize m) t) 0 = lsize m D.
Proof.
  intros m t d D H. apply nth_error_nth. apply map_nth_error. exact H.
Qed.

(** * Local indices, global indices and devices *)

(** The local indices of a device under [t], each exactly once. *)
Definition lindices (m : mesh) (t : atype) : list (list nat) := row_major (map (lsize m) t).

Lemma lindices_length : forall m t, length (lindices m t) = size m t.
Proof. intros. rewrite size_prod. unfold lindices. apply row_major_length. Qed.

Lemma lindices_NoDup : forall m t, NoDup (lindices m t).
Proof. intros. apply row_major_NoDup. Qed.

Lemma Forall2_map_l_iff : forall A B C (f : A -> B) (P : B -> C -> Prop) l1 l2,
  Forall2 P (map f l1) l2 <-> Forall2 (fun x y => P (f x) y) l1 l2.
Proof.
  intros A B C f P l1. induction l1 as [|x l1 IH]; intros l2; simpl; split; intros H.
  - inversion H. constructor.
  - inversion H. constructor.
  - inversion H as [|? y ? l2' Hxy Hrest]; subst. constructor; [exact Hxy|]. apply IH, Hrest.
  - inversion H as [|? y ? l2' Hxy Hrest]; subst. constructor; [exact Hxy|]. apply IH, Hrest.
Qed.

Lemma lindices_In : forall m t i, In i (lindices m t) <-> in_range m t i.
Proof.
  intros m t i. unfold lindices, in_range. rewrite row_major_In, Forall2_map_l_iff. reflexivity.
Qed.

Lemma gindex_cons : forall m D t c k i,
  gindex m (D :: t) c (k :: i) = gidx m D c k :: gindex m t c i.
Proof. reflexivity. Qed.

(** The global index of a device is injective on its local indices. *)
Lemma gindex_inj : forall m t c i1 i2, in_range m t i1 -> in_range m t i2 ->
  gindex m t c i1 = gindex m t c i2 -> i1 = i2.
Proof.
  intros m t c i1 i2 H1. revert i2. unfold in_range in H1.
  induction H1 as [|D k1 t i1 Hk1 Hr1 IH]; intros i2 H2 E; inversion H2 as [|? k2 ? i2' Hk2 Hr2]; subst.
  - reflexivity.
  - rewrite !gindex_cons in E. injection E as E1 E2. unfold gidx in E1.
    f_equal; [lia|]. apply IH; auto.
Qed.

(** The global index depends on a device only through its coordinates on
    the axes of the mesh. *)
Lemma gindex_dev_ext : forall m t c1 c2 i, wf m t ->
  (forall a, a < length m -> c1 a = c2 a) -> gindex m t c1 i = gindex m t c2 i.
Proof.
  intros m t c1 c2 i [_ [HF _]] H. unfold gindex. apply map_ext_in.
  intros [D k] Hin. apply in_combine_l in Hin. simpl. unfold gidx, block.
  rewrite Forall_forall in HF. destruct (HF D Hin) as [_ [Ha _]].
  rewrite (mr_ext m (axes D) c1 c2); auto.
Qed.

Lemma rank_eq_agree : forall m c1 c2, valid m c1 -> valid m c2 ->
  rank m c1 = rank m c2 -> forall a, a < length m -> c1 a = c2 a.
Proof.
  intros m c1 c2 H1 H2 E a Ha. apply (mr_inj m (all_axes m)); auto.
  - apply seq_NoDup.
  - intros b Hb. apply in_seq in Hb. split; [apply H1|apply H2]; lia.
  - apply in_seq. lia.
Qed.

Lemma agree_rank_eq : forall m c1 c2,
  (forall a, a < length m -> c1 a = c2 a) -> rank m c1 = rank m c2.
Proof.
  intros m c1 c2 H. unfold rank. apply mr_ext. intros a Ha. apply in_seq in Ha. apply H. lia.
Qed.

(** * Per step: what a device receives from other devices *)

(** The element at local index [i] of device [c] after the step comes from
    another device. *)
Definition from_other (m : mesh) (t : atype) (op : coll) (t' : atype) (c : coords)
  (i : list nat) : bool :=
  negb (rank m (fst (source m t op t' c i)) =? rank m c).

(** How many elements of its new local array device [c] gets from other devices. *)
Definition from_others (m : mesh) (t : atype) (op : coll) (t' : atype) (c : coords) : nat :=
  length (filter (from_other m t op t' c) (lindices m t')).

Lemma from_others_le_size : forall m t op t' c, from_others m t op t' c <= size m t'.
Proof.
  intros. unfold from_others. rewrite <- lindices_length.
  pose proof (filter_length_split _ (from_other m t op t' c) (lindices m t')). lia.
Qed.

(** Gathers and all-to-alls: the element at local index [i] comes from
    another device exactly when it is not in piece [mr xs c] along [d]. *)
Lemma from_other_piece : forall m t op t' c d xs l,
  wf m t -> valid m c -> NoDup xs -> (forall a, In a xs -> a < length m) ->
  (forall i, fst (source m t op t' c i) = set_digits m xs c (nth d i 0 / l)) ->
  (forall i, In i (lindices m t') -> nth d i 0 / l < nprod m xs) ->
  from_others m t op t' c =
  length (filter (fun i => negb (nth d i 0 / l =? mr m xs c)) (lindices m t')).
Proof.
  intros m t op t' c d xs l Ht Hc Hnd HxL Hsrc Hk. unfold from_others.
  assert (Hm : wf_mesh m) by apply Ht.
  f_equal. apply filter_ext_in. intros i Hi. unfold from_other. rewrite Hsrc.
  destruct (Nat.eqb_spec (nth d i 0 / l) (mr m xs c)) as [E|E].
  - rewrite E, (agree_rank_eq m _ c), Nat.eqb_refl; [reflexivity|].
    intros a _. apply set_digits_self; auto.
  - destruct (Nat.eqb_spec (rank m (set_digits m xs c (nth d i 0 / l))) (rank m c)) as [R|R];
      [|reflexivity].
    exfalso. apply E.
    rewrite <- (set_digits_mr m xs c (nth d i 0 / l) Hnd (fun a Ha => Hm a (HxL a Ha)) (Hk i Hi)).
    apply mr_ext. intros a Ha. apply (rank_eq_agree m _ c); auto.
    apply set_digits_valid; auto.
Qed.

Lemma gather_count : forall m t d xs P g c,
  wf m t -> nth_error t d = Some (mkdim (P ++ xs) g) -> valid m c ->
  from_others m t (AllGather d xs) (set_nth t d (mkdim P g)) c = (nprod m xs - 1) * size m t.
Proof.
  intros m t d xs P g c Ht HD Hc.
  assert (Hm : wf_mesh m) by apply Ht.
  assert (HwD : wf_dim m (mkdim (P ++ xs) g)) by (eapply wf_nth; eauto).
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
  assert (Hnd : NoDup (P ++ xs)) by (apply (nodup_used_axes t d (mkdim (P ++ xs) g)); [apply Ht|auto]).
  apply NoDup_app_inv in Hnd. destruct Hnd as [HndP [Hndx Hdisj]].
  pose proof HwD as [Hg [HA Hdv]]. simpl in HA.
  assert (HxL : forall a, In a xs -> a < length m) by (intros; apply HA, in_or_app; auto).
  set (l := lsize m (mkdim (P ++ xs) g)). set (n := nprod m xs).
  assert (Hl : 0 < l) by (apply lsize_pos; auto).
  assert (E' : lsize m (mkdim P g) = l * n) by (apply lsize_prefix; auto).
  assert (Hr : mr m xs c < n) by (apply mr_lt; intros; apply Hc; auto).
  rewrite (from_other_piece m t _ _ c d xs l Ht Hc Hndx HxL).
  2:{ intros i. cbn [source fst]. rewrite HnD. reflexivity. }
  2:{ intros i Hi. apply lindices_In, in_range_iff in Hi. destruct Hi as [_ Hb].
      rewrite set_nth_length in Hb. specialize (Hb d Hdl).
      rewrite nth_set_nth_eq, E' in Hb by auto. apply Nat.div_lt_upper_bound; lia. }
  set (s := map (lsize m) t).
  assert (Hsl : d < length s) by (unfold s; rewrite map_length; auto).
  assert (Hsd : nth d s 0 = l) by (apply nth_map_lsize; auto).
  unfold lindices. rewrite map_set_nth. fold s.
  rewrite (count_coord (fun k => negb (k / l =? mr m xs c))) by (rewrite set_nth_length; auto).
  rewrite nth_set_nth_eq by auto. rewrite E', count_other_piece by auto.
  rewrite set_nth_set_nth.
  pose proof (prod_set_nth s d (l * n - l) _ (nth_error_nth' s 0 Hsl)) as X. rewrite Hsd in X.
  rewrite !size_prod. fold s.
  replace (l * n - l) with ((n - 1) * l) in X by (rewrite Nat.mul_sub_distr_r; lia).
  assert (X' : prod (set_nth s d ((n - 1) * l)) = (n - 1) * prod s).
  { apply (Nat.mul_cancel_r _ _ l); [lia|]. rewrite X. ring. }
  replace (l * n - l) with ((n - 1) * l) by (rewrite Nat.mul_sub_distr_r; lia). lia.
Qed.

Lemma alltoall_count : forall m t d e xs P g E c,
  wf m t -> d <> e -> nth_error t d = Some (mkdim (P ++ xs) g) -> nth_error t e = Some E ->
  Nat.divide (nprod m xs) (lsize m E) -> valid m c ->
  from_others m t (AllToAll d e xs)
    (set_nth (set_nth t d (mkdim P g)) e (mkdim (axes E ++ xs) (gsize E))) c
  = size m t - size m t / nprod m xs.
Proof.
  intros m t d e xs P g E c Ht Hde HD HE [z Hz] Hc.
  assert (Hm : wf_mesh m) by apply Ht.
  assert (HwD : wf_dim m (mkdim (P ++ xs) g)) by (eapply wf_nth; eauto).
  assert (HwE : wf_dim m E) by (eapply wf_nth; eauto).
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (Hel : e < length t) by (apply nth_error_Some; congruence).
  assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
  assert (Hnd : NoDup (P ++ xs)) by (apply (nodup_used_axes t d (mkdim (P ++ xs) g)); [apply Ht|auto]).
  apply NoDup_app_inv in Hnd. destruct Hnd as [HndP [Hndx Hdisj]].
  pose proof HwD as [Hg [HA Hdv]]. simpl in HA.
  assert (HxL : forall a, In a xs -> a < length m) by (intros; apply HA, in_or_app; auto).
  set (l := lsize m (mkdim (P ++ xs) g)). set (n := nprod m xs). fold n in Hz.
  assert (Hl : 0 < l) by (apply lsize_pos; auto).
  assert (Hn : 0 < n) by (apply nprod_pos; auto).
  assert (EL' : lsize m (mkdim P g) = l * n) by (apply lsize_prefix; auto).
  assert (EE' : lsize m (mkdim (axes E ++ xs) (gsize E)) = z) by (apply lsize_extend; auto).
  assert (HEpos : 0 < lsize m E) by (apply lsize_pos; auto).
  assert (Hzpos : 0 < z) by (destruct z; lia).
  assert (Hr : mr m xs c < n) by (apply mr_lt; intros; apply Hc; auto).
  rewrite (from_other_piece m t _ _ c d xs l Ht Hc Hndx HxL).
  2:{ intros i. cbn [source fst]. rewrite HnD. reflexivity. }
  2:{ intros i Hi. apply lindices_In, in_range_iff in Hi. destruct Hi as [_ Hb].
      rewrite !set_nth_length in Hb. specialize (Hb d Hdl).
      rewrite nth_set_nth_neq, nth_set_nth_eq, EL' in Hb by auto.
      apply Nat.div_lt_upper_bound; lia. }
  set (s := map (lsize m) t).
  assert (Hsl : d < length s) by (unfold s; rewrite map_length; auto).
  assert (Hsel : e < length s) by (unfold s; rewrite map_length; auto).
  assert (Hsd : nth d s 0 = l) by (apply nth_map_lsize; auto).
  assert (Hse : nth e s 0 = z * n) by (rewrite <- Hz; apply nth_map_lsize; auto).
  unfold lindices. rewrite !map_set_nth. fold s. rewrite EL', EE'.
  set (s1 := set_nth s d (l * n)). set (s2 := set_nth s1 e z).
  assert (Hs1l : length s1 = length s) by (unfold s1; apply set_nth_length).
  assert (Hs2l : length s2 = length s) by (unfold s2; rewrite set_nth_length; auto).
  assert (Hs2d : nth d s2 0 = l * n).
  { unfold s2, s1. rewrite nth_set_nth_neq by auto. apply nth_set_nth_eq; auto. }
  assert (Hs1e : nth e s1 0 = z * n) by (unfold s1; rewrite nth_set_nth_neq by auto; auto).
  rewrite (count_coord (fun k => negb (k / l =? mr m xs c))) by lia.
  rewrite Hs2d, count_other_piece by auto.
  rewrite !size_prod. fold s.
  pose proof (prod_set_nth s d (l * n) _ (nth_error_nth' s 0 Hsl)) as A1. fold s1 in A1. rewrite Hsd in A1.
  pose proof (prod_set_nth s1 e z _ (nth_error_nth' s1 0 (ltac:(lia) : e < length s1))) as A2.
  fold s2 in A2. rewrite Hs1e in A2.
  pose proof (prod_set_nth s2 d (l * n - l) _ (nth_error_nth' s2 0 (ltac:(lia) : d < length s2))) as A3.
  rewrite Hs2d in A3.
  pose proof (prod_set_nth s2 d l _ (nth_error_nth' s2 0 (ltac:(lia) : d < length s2))) as A4.
  rewrite Hs2d in A4.
  set (Q := prod (set_nth s2 d l)) in A4.
  set (R := prod (set_nth s2 d (l * n - l))) in A3 |- *.
  assert (B1 : prod s1 = n * prod s).
  { apply (Nat.mul_cancel_r _ _ l); [lia|]. rewrite A1. ring. }
  assert (B2 : prod s2 = prod s).
  { apply (Nat.mul_cancel_r _ _ (z * n)); [nia|]. rewrite A2, B1. ring. }
  assert (B3 : prod s = Q * n).
  { apply (Nat.mul_cancel_r _ _ l); [lia|]. rewrite <- B2, <- A4. ring. }
  assert (B4 : prod s / n = Q) by (rewrite B3; apply Nat.div_mul; lia).
  assert (B5 : R = (n - 1) * Q).
  { apply (Nat.mul_cancel_r _ _ (l * n)); [nia|]. rewrite A3, B2, B3.
    replace (l * n - l) with ((n - 1) * l) by (rewrite Nat.mul_sub_distr_r; lia). ring. }
  rewrite B4, B5, B3, Nat.mul_sub_distr_r. lia.
Qed.

Lemma permute_bound : forall m t t' c,
  wf m t -> wf m t' -> map gsize t' = map gsize t -> map (lsize m) t' = map (lsize m) t ->
  valid m c -> from_others m t (AllPermute t') t' c <= (if moves m t t' then size m t else 0).
Proof.
  intros m t t' c Ht Ht' Hg Hl Hc.
  destruct (moves m t t') eqn:Hmv.
  - eapply Nat.le_trans; [apply from_others_le_size|]. rewrite !size_prod. rewrite Hl. lia.
  - assert (Hbl : blocks m t c = blocks m t' c).
    { destruct (list_eq_dec Nat.eq_dec (blocks m t c) (blocks m t' c)) as [E|E]; auto.
      exfalso. assert (X : moves m t t' = true) by (apply moves_spec; eauto).
      congruence. }
    unfold from_others. rewrite filter_length_none; auto.
    intros i _. unfold from_other. cbn [source fst].
    rewrite (agree_rank_eq m _ c).
    + rewrite Nat.eqb_refl. reflexivity.
    + apply perm_src_fixed; auto. split; auto.
Qed.

(** Per step, a device receives from other devices at most what the
    checker reports. *)
Theorem from_others_le_recv : forall m t op t' c,
  wf m t -> step m t op t' -> valid m c -> from_others m t op t' c <= recv m t op t'.
Proof.
  intros m t op t' c Ht Hs Hc.
  destruct Hs as [d xs P g HD Hxs | d xs D HD Hxs HxL Hnd Hnu Hdiv
                 | d e xs P g E Hde HD HE Hxs Hdiv | t'' Ht'' Hg Hl]; cbn [recv].
  - rewrite gather_count; auto.
  - unfold from_others. rewrite filter_length_none; auto.
    intros i _. unfold from_other. cbn [source fst]. rewrite Nat.eqb_refl. reflexivity.
  - rewrite alltoall_count; auto.
  - apply permute_bound; auto.
Qed.

Lemma fold_max_ge : forall l x, In x l -> x <= fold_right Nat.max 0 l.
Proof.
  induction l as [|y l IH]; simpl; intros x Hx; [contradiction|].
  destruct Hx as [<-|Hx]; [lia|]. specialize (IH x Hx). lia.
Qed.

Lemma filter_length_all : forall A (p : A -> bool) l,
  (forall x, In x l -> p x = true) -> length (filter p l) = length l.
Proof.
  intros A p l. induction l as [|x l IH]; simpl; intros Hp; auto.
  rewrite (Hp x (or_introl eq_refl)). simpl. rewrite IH; auto.
Qed.

Lemma ndevices_pos : forall m, wf_mesh m -> 0 < ndevices m.
Proof.
  intros m Hm. rewrite <- nprod_all_axes. apply nprod_pos; auto.
  intros a Ha. apply in_seq in Ha. lia.
Qed.

(** The checker's figure is reached: some device receives exactly [recv]
    from other devices (for a permute that moves, a device whose blocks
    change gets its whole new local array from another device). *)
Theorem recv_worst_device : forall m t op t', wf m t -> step m t op t' ->
  exists r, r < ndevices m /\ from_others m t op t' (coords_of_rank m r) = recv m t op t'.
Proof.
  intros m t op t' Ht Hs. assert (Hm : wf_mesh m) by apply Ht.
  pose proof (ndevices_pos m Hm) as Hn.
  destruct Hs as [d xs P g HD Hxs | d xs D HD Hxs HxL Hnd Hnu Hdiv
                 | d e xs P g E Hde HD HE Hxs Hdiv | t'' Ht'' Hg Hl]; cbn [recv].
  - exists 0. split; auto. apply gather_count; auto. apply coords_of_rank_valid; auto.
  - exists 0. split; auto. unfold from_others. apply filter_length_none.
    intros i _. unfold from_other. cbn [source fst]. rewrite Nat.eqb_refl. reflexivity.
  - exists 0. split; auto. apply alltoall_count; auto. apply coords_of_rank_valid; auto.
  - destruct (moves m t t'') eqn:Hmv.
    + rewrite moves_enum_iff in Hmv by auto. unfold moves_enum in Hmv.
      apply existsb_exists in Hmv. destruct Hmv as [r [Hr Hne]]. apply in_seq in Hr.
      exists r. split; [lia|].
      set (c := coords_of_rank m r).
      assert (Hc : valid m c) by (apply coords_of_rank_valid; auto).
      unfold from_others. rewrite filter_length_all.
      * rewrite lindices_length. rewrite !size_prod. rewrite Hl. reflexivity.
      * intros i _. unfold from_other. cbn [source fst]. apply negb_true_iff.
        destruct (Nat.eqb_spec (rank m (perm_src m t t'' c)) (rank m c)) as [R|R]; auto.
        exfalso. fold c in Hne. apply negb_true_iff in Hne.
        assert (Hb : blocks m t c = blocks m t'' c).
        { rewrite <- (perm_src_blocks m t t'' c Ht Ht'' (conj Hg Hl) Hc).
          apply blocks_ext; auto. intros a Ha. symmetry.
          apply (rank_eq_agree m _ c); auto. apply perm_src_valid; auto. split; auto. }
        apply nat_list_eqb_spec in Hb. congruence.
    + exists 0. split; auto. pose proof (permute_bound m t t'' (coords_of_rank m 0) Ht Ht'' Hg Hl) as B.
      rewrite Hmv in B. specialize (B (coords_of_rank_valid m 0 Hm)). lia.
Qed.

(** Hence [recv] is the most any device receives from other devices. *)
Corollary recv_max : forall m t op t', wf m t -> step m t op t' ->
  recv m t op t' =
  fold_right Nat.max 0 (map (fun r => from_others m t op t' (coords_of_rank m r)) (seq 0 (ndevices m))).
Proof.
  intros m t op t' Ht Hs. assert (Hm : wf_mesh m) by apply Ht. apply Nat.le_antisymm.
  - destruct (recv_worst_device m t op t' Ht Hs) as [r [Hr E]]. rewrite <- E.
    apply fold_max_ge. apply in_map_iff. exists r. split; auto. apply in_seq. lia.
  - apply fold_max_le. intros x Hx. apply in_map_iff in Hx. destruct Hx as [r [<- _]].
    apply from_others_le_recv; auto. apply coords_of_rank_valid; auto.
Qed.

(** * Provenance: what a device misses is received at some step *)

(** Elements that device [c] holds under [t] whose global index fails [h]. *)
Definition missing (m : mesh) (h : list nat -> bool) (t : atype) (c : coords) : nat :=
  length (filter (fun i => negb (h (gindex m t c i))) (lindices m t)).

(** An element a device gets from itself was at a local index holding the
    same global index. *)
Lemma source_self : forall m t op t' c i,
  wf m t -> step m t op t' -> valid m c -> in_range m t' i -> from_other m t op t' c i = false ->
  in_range m t (snd (source m t op t' c i)) /\
  gindex m t c (snd (source m t op t' c i)) = gindex m t' c i.
Proof.
  intros m t op t' c i Ht Hs Hc Hi Ho.
  pose proof (source_sound m t op t' c i Ht Hs Hc Hi) as Hsnd.
  unfold from_other in Ho.
  destruct (source m t op t' c i) as [c1 i1]. cbn [fst snd] in *.
  destruct Hsnd as [V1 [R1 G1]]. split; auto. rewrite <- G1.
  apply gindex_dev_ext; auto. apply rank_eq_agree; auto.
  apply negb_false_iff, Nat.eqb_eq in Ho. auto.
Qed.

Lemma missing_step : forall m h t op t' c,
  wf m t -> step m t op t' -> valid m c ->
  missing m h t' c <= from_others m t op t' c + missing m h t c.
Proof.
  intros m h t op t' c Ht Hs Hc. unfold missing, from_others.
  eapply Nat.le_trans; [apply (filter_length_cover _ _ (from_other m t op t' c))|].
  apply Nat.add_le_mono_l.
  apply (length_le_inj _ _ (fun i => snd (source m t op t' c i))).
  - apply NoDup_filter, lindices_NoDup.
  - intros x y Hx Hy E. apply filter_In in Hx, Hy.
    destruct Hx as [Hx Hpx], Hy as [Hy Hpy].
    apply andb_true_iff in Hpx as [_ Hox]. apply andb_true_iff in Hpy as [_ Hoy].
    apply negb_true_iff in Hox, Hoy. apply lindices_In in Hx, Hy.
    destruct (source_self m t op t' c x Ht Hs Hc Hx Hox) as [_ Gx].
    destruct (source_self m t op t' c y Ht Hs Hc Hy Hoy) as [_ Gy].
    apply (gindex_inj m t' c x y Hx Hy). rewrite <- Gx, <- Gy, E. reflexivity.
  - intros x Hx. apply filter_In in Hx. destruct Hx as [Hx Hpx].
    apply andb_true_iff in Hpx as [Hhx Hox]. apply negb_true_iff in Hox.
    apply lindices_In in Hx.
    destruct (source_self m t op t' c x Ht Hs Hc Hx Hox) as [Rx Gx].
    apply filter_In. split; [apply lindices_In; auto|]. rewrite Gx. exact Hhx.
Qed.

(** Along a trace, what is missed at the end was missed at the start or
    received on the way. *)
Lemma missing_trace : forall m h c t p ts rs, trace m t p ts rs -> wf m t -> valid m c ->
  missing m h (last ts t) c <= missing m h t c + traffic rs.
Proof.
  intros m h c t p ts rs Htr. induction Htr as [t|t op t1 p ts rs Hs Htr IH]; intros Ht Hc.
  - simpl. lia.
  - pose proof (trace_nonempty _ _ _ _ _ Htr) as Hne.
    rewrite last_cons_ne by exact Hne. rewrite (last_indep _ ts t t1) by exact Hne.
    pose proof (IH (step_wf m t op t1 Ht Hs) Hc) as H1.
    pose proof (missing_step m h t op t1 c Ht Hs Hc) as H2.
    pose proof (from_others_le_recv m t op t1 c Ht Hs Hc) as H3.
    cbn [traffic fold_right]. fold (traffic rs). lia.
Qed.

(** * Counting what a device holds in the source *)

(** The global index [g] lies in device [c]'s block under [src]. *)
Fixpoint holds (m : mesh) (src : atype) (c : coords) (g : list nat) : bool :=
  match src, g with
  | [], [] => true
  | D :: s, k :: g' => (gidx m D c 0 <=? k) && (k <? gidx m D c 0 + lsize m D) && holds m s c g'
  | _, _ => false
  end.

Lemma holds_source : forall m src c i, in_range m src i -> holds m src c (gindex m src c i) = true.
Proof.
  intros m src c i Hi. unfold in_range in Hi.
  induction Hi as [|D k t i Hk Hr IH]; [reflexivity|].
  rewrite gindex_cons. cbn [holds]. rewrite IH, andb_true_r. apply andb_true_iff.
  unfold gidx. rewrite Nat.leb_le, Nat.ltb_lt. lia.
Qed.

(** The target elements a device holds in the source are counted by [kept]. *)
Lemma count_holds : forall m c src dst, length src = length dst ->
  length (filter (fun i => holds m src c (gindex m dst c i)) (lindices m dst)) = kept m src dst c.
Proof.
  intros m c src dst. revert src. unfold lindices, kept.
  induction dst as [|E dst IH]; intros [|D src] Hlen; simpl in Hlen; try discriminate.
  - reflexivity.
  - cbn [map row_major combine fst snd prod fold_right]. fold (prod
      (map (fun DE => overlap (gidx m (fst DE) c 0) (lsize m (fst DE))
                              (gidx m (snd DE) c 0) (lsize m (snd DE))) (combine src dst))).
    rewrite (count_prod _ (fun k => (gidx m D c 0 <=? gidx m E c k) && (gidx m E c k <? gidx m D c 0 + lsize m D))
                        (fun i => holds m src c (gindex m dst c i))) by (intros; reflexivity).
    rewrite IH by lia. f_equal.
    rewrite (filter_ext_in _ (fun k => (gidx m D c 0 <=? gidx m E c 0 + k) && (gidx m E c 0 + k <? gidx m D c 0 + lsize m D))).
    + apply count_interval.
    + intros k _. replace (gidx m E c k) with (gidx m E c 0 + k) by (unfold gidx; lia).
      reflexivity.
Qed.

(** * The lower bound *)

Theorem accepted_traffic_need : forall m src dst p r c,
  check m src dst p = Ok r -> valid m c -> need m src dst c <= traffic (received r).
Proof.
  intros m src dst p r c Hchk Hc.
  apply check_ok_iff in Hchk as [[Hs [Hd Hg]] [Htr [Hlast _]]].
  pose proof (missing_trace m (holds m src c) c src p (types r) (received r) Htr Hs Hc) as Hmiss.
  rewrite Hlast in Hmiss.
  assert (Hmiss0 : missing m (holds m src c) src c = 0).
  { unfold missing. apply filter_length_none. intros i Hi. apply lindices_In in Hi.
    rewrite holds_source; auto. }
  assert (Hlen : length src = length dst).
  { rewrite <- (map_length gsize src), <- (map_length gsize dst), Hg. reflexivity. }
  pose proof (filter_length_split _ (fun i => holds m src c (gindex m dst c i)) (lindices m dst)) as S.
  rewrite count_holds, lindices_length in S by exact Hlen.
  unfold missing in Hmiss, Hmiss0. unfold need. lia.
Qed.

(** A figure every valid device stays within bounds the most over all
    devices (how each lower bound turns its per-device form into the worst
    device's). *)
Lemma fold_max_devices : forall m (f : coords -> nat) b, wf_mesh m -> (forall c, valid m c -> f c <= b) ->
  fold_right Nat.max 0 (map (fun r => f (coords_of_rank m r)) (seq 0 (ndevices m))) <= b.
Proof.
  intros m f b Hm H. apply fold_max_le. intros x Hx. apply in_map_iff in Hx. destruct Hx as [k [<- _]].
  apply H, coords_of_rank_valid, Hm.
Qed.

Theorem accepted_traffic_lower_bound : forall m src dst p r,
  check m src dst p = Ok r -> lower_bound m src dst <= traffic (received r).
Proof.
  intros m src dst p r Hchk. pose proof Hchk as Hchk'. apply check_ok_iff in Hchk' as [[Hs _] _].
  apply fold_max_devices; [apply Hs|]. intros c Hc. apply (accepted_traffic_need m src dst p r); auto.
Qed.
