(** The device bijection of an [AllPermute]: which device sends its local
    array to which. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types Rules.
Import ListNotations.

(** Axes a type leaves replicated, in mesh order. *)
Definition replicated (m : mesh) (t : atype) : list nat :=
  filter (fun a => negb (memb a (used t))) (all_axes m).

(** Axes replicated in [t] but used in [t'], in mesh order. *)
Definition gained (m : mesh) (t t' : atype) : list nat :=
  filter (fun a => memb a (used t')) (replicated m t).

(** The device that holds, under [t], what device [c] must hold under [t'].
    On the axes [t] uses it has the digits of [c]'s [t']-blocks (so it
    holds under [t] the blocks [c] needs under [t']); on the axes replicated
    in both types it agrees with [c]; on the axes [X] replicated in [t] but
    used in [t'] its number is [c]'s number on the axes [Y] used in [t] but
    replicated in [t'], cyclically shifted within the group of devices with
    the same [t']-blocks so that a device whose blocks do not change is its
    own source. Within each such group this is a bijection between the
    devices that need a block and the devices that hold it. *)
Definition perm_src (m : mesh) (t t' : atype) (c : coords) : coords :=
  let X := gained m t t' in
  let Y := gained m t' t in
  let N := nprod m X in
  let b := set_digits m (used t) c (mr m (used t') c) in
  set_digits m X b ((mr m Y c + N - mr m Y b + mr m X c) mod N).

(** [p_c] for every rank [c]: rank [p_c] sends its local array to rank [c]. *)
Definition permute_table (m : mesh) (t t' : atype) : list nat :=
  map (fun r => rank m (perm_src m t t' (coords_of_rank m r))) (seq 0 (ndevices m)).

Definition same_local_shape (m : mesh) (t t' : atype) : Prop :=
  map gsize t' = map gsize t /\ map (lsize m) t' = map (lsize m) t.

(** * Helpers *)

Lemma memb_false : forall x l, memb x l = false <-> ~ In x l.
Proof.
  intros x l. split.
  - intros H Hin. apply memb_spec in Hin. congruence.
  - intros H. destruct (memb x l) eqn:E; auto. apply memb_spec in E. contradiction.
Qed.

Lemma NoDup_map_on : forall A B (f : A -> B) l,
  (forall x y, In x l -> In y l -> f x = f y -> x = y) -> NoDup l -> NoDup (map f l).
Proof.
  intros A B f l. induction l as [|x l IH]; simpl; intros Hinj Hnd; constructor.
  - inversion Hnd; subst. intro Hin. apply in_map_iff in Hin. destruct Hin as [y [Hy Hin]].
    assert (y = x) by (apply Hinj; auto). subst. contradiction.
  - inversion Hnd; subst. apply IH; auto.
Qed.

Lemma nprod_concat : forall m As, nprod m (concat As) = prod (map (nprod m) As).
Proof. induction As; simpl; auto. rewrite nprod_app, IHAs. reflexivity. Qed.

Lemma perm_filter_split : forall (f : nat -> bool) l,
  Permutation l (filter f l ++ filter (fun x => negb (f x)) l).
Proof.
  intros f l. induction l as [|x l IH]; simpl; auto.
  destruct (f x); simpl; [constructor; auto | apply Permutation_cons_app; auto].
Qed.

Lemma filter_comm : forall (f g : nat -> bool) l, filter f (filter g l) = filter g (filter f l).
Proof.
  intros f g l. induction l as [|x l IH]; simpl; auto.
  destruct (g x) eqn:Eg, (f x) eqn:Ef; simpl; rewrite ?Eg, ?Ef, IH; auto.
Qed.

Lemma divmod_uniq : forall n a r b r', r < n -> r' < n -> a * n + r = b * n + r' -> a = b /\ r = r'.
Proof.
  intros n a r b r' H1 H2 H. destruct (lt_eq_lt_dec a b) as [[Hab|Hab]|Hab].
  - exfalso. nia.
  - subst. lia.
  - exfalso. nia.
Qed.

Lemma mod_add_inj : forall N y1 y2 r, y1 < N -> y2 < N -> (y1 + r) mod N = (y2 + r) mod N -> y1 = y2.
Proof.
  intros N y1 y2 r H1 H2 H.
  pose proof (Nat.div_mod (y1 + r) N) as D1. pose proof (Nat.div_mod (y2 + r) N) as D2.
  rewrite H in D1.
  destruct (lt_eq_lt_dec ((y1 + r) / N) ((y2 + r) / N)) as [[Hq|Hq]|Hq].
  - exfalso. nia.
  - rewrite Hq in D1. lia.
  - exfalso. nia.
Qed.

Ltac used_lt :=
  match goal with
  | H : In ?a (used ?t), W : wf ?m ?t |- ?a < length ?m => exact (wf_used_lt m t a W H)
  end.

Lemma used_concat : forall t, used t = concat (map axes t).
Proof. intros. unfold used. apply flat_map_concat_map. Qed.

Lemma blocks_map : forall m t c, blocks m t c = map (fun A => mr m A c) (map axes t).
Proof. intros. unfold blocks, block. rewrite map_map. reflexivity. Qed.

(** Same global and local shape: same group size in every dimension. *)
Lemma dims_nprod : forall m t t', wf_mesh m -> Forall (wf_dim m) t -> Forall (wf_dim m) t' ->
  map gsize t' = map gsize t -> map (lsize m) t' = map (lsize m) t ->
  map (nprod m) (map axes t') = map (nprod m) (map axes t).
Proof.
  intros m t. induction t as [|D t IH]; intros t' Hm Ht Ht' Hg Hl; destruct t' as [|D' t'];
    simpl in *; try discriminate; auto.
  injection Hg as Hg1 Hg2. injection Hl as Hl1 Hl2.
  inversion Ht; subst. inversion Ht'; subst. f_equal; [|apply IH; auto].
  pose proof (lsize_mul m D Hm ltac:(auto)) as E. pose proof (lsize_mul m D' Hm ltac:(auto)) as E'.
  pose proof (lsize_pos m D Hm ltac:(auto)) as P.
  rewrite Hl1, Hg1 in E'. rewrite <- E in E'. apply Nat.mul_cancel_l in E'; lia.
Qed.

Lemma nprod_used : forall m t t', wf m t -> wf m t' -> same_local_shape m t t' ->
  nprod m (used t') = nprod m (used t).
Proof.
  intros m t t' [Hm [Ht _]] [_ [Ht' _]] [Hg Hl]. rewrite !used_concat, !nprod_concat.
  rewrite (dims_nprod m t t'); auto.
Qed.

(** Mixed radix over a concatenation: equal numbers with equal radices give
    equal digits group by group, and conversely. *)
Lemma mr_concat_inj : forall m As Bs s c,
  map (nprod m) As = map (nprod m) Bs ->
  (forall a, In a (concat As) -> s a < asize m a) ->
  (forall a, In a (concat Bs) -> c a < asize m a) ->
  mr m (concat As) s = mr m (concat Bs) c ->
  map (fun A => mr m A s) As = map (fun B => mr m B c) Bs.
Proof.
  intros m As. induction As as [|A As IH]; intros Bs s c Hn Hs Hc Heq;
    destruct Bs as [|B Bs]; simpl in *; try discriminate; auto.
  injection Hn as HAB Hn'. rewrite !mr_app in Heq.
  assert (E : nprod m (concat As) = nprod m (concat Bs)) by (rewrite !nprod_concat, Hn'; auto).
  assert (L1 : mr m (concat As) s < nprod m (concat As))
    by (apply mr_lt; intros; apply Hs, in_or_app; auto).
  assert (L2 : mr m (concat Bs) c < nprod m (concat Bs))
    by (apply mr_lt; intros; apply Hc, in_or_app; auto).
  rewrite E in Heq, L1. destruct (divmod_uniq _ _ _ _ _ L1 L2 Heq) as [H1 H2].
  f_equal; auto. apply IH; auto; intros; [apply Hs|apply Hc]; apply in_or_app; auto.
Qed.

Lemma mr_concat_eq : forall m As Bs s c,
  map (nprod m) As = map (nprod m) Bs ->
  map (fun A => mr m A s) As = map (fun B => mr m B c) Bs ->
  mr m (concat As) s = mr m (concat Bs) c.
Proof.
  intros m As. induction As as [|A As IH]; intros Bs s c Hn Hb;
    destruct Bs as [|B Bs]; simpl in *; try discriminate; auto.
  injection Hn as HAB Hn'. injection Hb as Hb1 Hb2. rewrite !mr_app, Hb1, (IH Bs s c); auto.
  rewrite !nprod_concat, Hn'. reflexivity.
Qed.

(** Writing a device's own number back changes nothing. *)
Lemma set_digits_self : forall m A c, wf_mesh m -> valid m c -> NoDup A ->
  (forall a, In a A -> a < length m) -> forall a, set_digits m A c (mr m A c) a = c a.
Proof.
  intros m A c Hm Hc Hnd HA a. destruct (in_dec Nat.eq_dec a A) as [Ha|Ha].
  - apply (mr_inj m A); auto.
    + intros b Hb. split; [apply set_digits_valid|apply Hc]; auto.
    + apply set_digits_mr; auto. apply mr_lt. intros; apply Hc; auto.
  - apply set_digits_other; auto.
Qed.

(** * The axis classes *)

Lemma gained_spec : forall m t t' a,
  In a (gained m t t') <-> a < length m /\ ~ In a (used t) /\ In a (used t').
Proof.
  intros. unfold gained, replicated, all_axes.
  rewrite !filter_In, in_seq, negb_true_iff, memb_false, memb_spec. intuition lia.
Qed.

Lemma gained_NoDup : forall m t t', NoDup (gained m t t').
Proof. intros. apply NoDup_filter, NoDup_filter, seq_NoDup. Qed.

Lemma gained_lt : forall m t t' a, In a (gained m t t') -> a < length m.
Proof. intros m t t' a H. apply gained_spec in H. tauto. Qed.

Lemma nprod_split_used : forall m t, wf m t ->
  nprod m (all_axes m) = nprod m (used t) * nprod m (replicated m t).
Proof.
  intros m t Ht. rewrite (nprod_perm m _ _ (perm_filter_split (fun a => memb a (used t)) (all_axes m))).
  rewrite nprod_app. f_equal. apply nprod_perm, NoDup_Permutation.
  - apply NoDup_filter, seq_NoDup.
  - apply Ht.
  - intros a. unfold all_axes. rewrite filter_In, in_seq, memb_spec.
    split; [tauto|]. intros H. split; auto. pose proof (wf_used_lt m t a Ht H). lia.
Qed.

Lemma nprod_gained : forall m t t', wf m t -> wf m t' -> same_local_shape m t t' ->
  nprod m (gained m t' t) = nprod m (gained m t t').
Proof.
  intros m t t' Ht Ht' Hs.
  set (C := filter (fun a => negb (memb a (used t'))) (replicated m t)).
  assert (E1 : nprod m (replicated m t) = nprod m (gained m t t') * nprod m C).
  { rewrite <- nprod_app. apply nprod_perm, perm_filter_split. }
  assert (E2 : nprod m (replicated m t') = nprod m (gained m t' t) * nprod m C).
  { rewrite <- nprod_app. apply nprod_perm.
    replace C with (filter (fun a => negb (memb a (used t))) (replicated m t'))
      by (unfold C, replicated; apply filter_comm).
    apply perm_filter_split. }
  assert (PC : 0 < nprod m C).
  { apply nprod_pos; [apply Ht|]. intros a Ha. unfold C, replicated, all_axes in Ha.
    rewrite !filter_In, in_seq in Ha. lia. }
  assert (PU : 0 < nprod m (used t)) by (apply nprod_pos; [apply Ht|]; intros; used_lt).
  pose proof (nprod_split_used m t Ht) as S. pose proof (nprod_split_used m t' Ht') as S'.
  rewrite (nprod_used m t t' Ht Ht' Hs), E2, S in S'. rewrite E1 in S'.
  apply Nat.mul_cancel_l in S'; [|lia]. apply Nat.mul_cancel_r in S'; lia.
Qed.

(** * Properties of [perm_src] *)

Lemma perm_src_other : forall m t t' c a, ~ In a (gained m t t') ->
  perm_src m t t' c a = set_digits m (used t) c (mr m (used t') c) a.
Proof. intros. unfold perm_src. apply set_digits_other; auto. Qed.

Theorem perm_src_valid : forall m t t' c,
  wf m t -> wf m t' -> same_local_shape m t t' -> valid m c -> valid m (perm_src m t t' c).
Proof.
  intros m t t' c Ht Ht' Hs Hc. unfold perm_src.
  apply set_digits_valid; [apply Ht|]. apply set_digits_valid; auto. apply Ht.
Qed.

Lemma perm_src_used : forall m t t' c,
  wf m t -> wf m t' -> same_local_shape m t t' -> valid m c ->
  mr m (used t) (perm_src m t t' c) = mr m (used t') c.
Proof.
  intros m t t' c Ht Ht' Hs Hc.
  rewrite (mr_ext m (used t) _ (set_digits m (used t) c (mr m (used t') c))).
  - apply set_digits_mr.
    + apply Ht.
    + intros a Ha. apply Ht. used_lt.
    + rewrite <- (nprod_used m t t' Ht Ht' Hs). apply mr_lt.
      intros a Ha. apply Hc. used_lt.
  - intros a Ha. apply perm_src_other. rewrite gained_spec. tauto.
Qed.

(** The source device holds under [t] exactly the blocks [c] needs under [t']. *)
Theorem perm_src_blocks : forall m t t' c,
  wf m t -> wf m t' -> same_local_shape m t t' -> valid m c ->
  blocks m t (perm_src m t t' c) = blocks m t' c.
Proof.
  intros m t t' c Ht Ht' Hs Hc. rewrite !blocks_map. apply mr_concat_inj.
  - symmetry. destruct Ht as [Hm [HF _]], Ht' as [_ [HF' _]], Hs. apply dims_nprod; auto.
  - intros a Ha. rewrite <- used_concat in Ha. apply perm_src_valid; auto. used_lt.
  - intros a Ha. rewrite <- used_concat in Ha. apply Hc. used_lt.
  - rewrite <- !used_concat. apply perm_src_used; auto.
Qed.

Lemma perm_src_inj : forall m t t' c1 c2,
  wf m t -> wf m t' -> same_local_shape m t t' -> valid m c1 -> valid m c2 ->
  (forall a, a < length m -> perm_src m t t' c1 a = perm_src m t t' c2 a) ->
  forall a, a < length m -> c1 a = c2 a.
Proof.
  intros m t t' c1 c2 Ht Ht' Hs Hc1 Hc2 H.
  assert (Hm : wf_mesh m) by apply Ht.
  set (b1 := set_digits m (used t) c1 (mr m (used t') c1)).
  set (b2 := set_digits m (used t) c2 (mr m (used t') c2)).
  assert (HU : forall a, In a (used t') -> c1 a = c2 a).
  { apply (mr_inj m (used t')).
    - apply Ht'.
    - intros a Ha. split; [apply Hc1|apply Hc2]; used_lt.
    - rewrite <- !(perm_src_used m t t') by auto. apply mr_ext. intros a Ha.
      apply H. used_lt. }
  assert (Hb : forall a, a < length m -> ~ In a (gained m t t') -> b1 a = b2 a).
  { intros a Ha Hx. unfold b1, b2. rewrite <- !(perm_src_other m t t') by auto. auto. }
  assert (HN : 0 < nprod m (gained m t t')) by (apply nprod_pos; auto; apply gained_lt).
  assert (HY : forall a, In a (gained m t' t) -> c1 a = c2 a).
  { apply (mr_inj m (gained m t' t)).
    - apply gained_NoDup.
    - intros a Ha. split; [apply Hc1|apply Hc2]; eapply gained_lt; eauto.
    - set (X := gained m t t'). set (Y := gained m t' t). set (N := nprod m X).
      assert (EY : mr m Y b1 = mr m Y b2).
      { apply mr_ext. intros a Ha. apply Hb; [eapply gained_lt; eauto|].
        unfold Y in Ha. rewrite gained_spec in Ha. rewrite gained_spec. tauto. }
      assert (EX : mr m X c1 = mr m X c2).
      { apply mr_ext. intros a Ha. apply HU. unfold X in Ha. rewrite gained_spec in Ha. tauto. }
      assert (K : forall c, valid m c ->
                 mr m X (perm_src m t t' c) =
                 (mr m Y c + N - mr m Y (set_digits m (used t) c (mr m (used t') c)) + mr m X c) mod N).
      { intros c Hc. unfold perm_src. fold X Y N. apply set_digits_mr.
        - apply gained_NoDup.
        - intros a Ha. apply Hm. eapply gained_lt; eauto.
        - apply Nat.mod_upper_bound. unfold N, X in *. lia. }
      assert (EK : mr m X (perm_src m t t' c1) = mr m X (perm_src m t t' c2)).
      { apply mr_ext. intros a Ha. apply H. eapply gained_lt; eauto. }
      rewrite (K c1 Hc1), (K c2 Hc2) in EK. fold b1 b2 in EK. rewrite EY, EX in EK.
      assert (LY : forall c, valid m c -> mr m Y c < N).
      { intros c Hc. unfold N, X. rewrite <- (nprod_gained m t t' Ht Ht' Hs). apply mr_lt.
        intros a Ha. apply Hc. eapply gained_lt; eauto. }
      assert (Lb2 : mr m Y b2 < N) by (apply LY; unfold b2; apply set_digits_valid; auto).
      pose proof (LY c1 Hc1). pose proof (LY c2 Hc2).
      replace (mr m Y c1 + N - mr m Y b2 + mr m X c2)
        with (mr m Y c1 + (N - mr m Y b2 + mr m X c2)) in EK by lia.
      replace (mr m Y c2 + N - mr m Y b2 + mr m X c2)
        with (mr m Y c2 + (N - mr m Y b2 + mr m X c2)) in EK by lia.
      eapply mod_add_inj; eauto. }
  intros a Ha. destruct (in_dec Nat.eq_dec a (used t')) as [Hu'|Hu']; [auto|].
  destruct (in_dec Nat.eq_dec a (used t)) as [Hu|Hu].
  - apply HY. rewrite gained_spec. auto.
  - assert (E : b1 a = b2 a) by (apply Hb; auto; rewrite gained_spec; tauto).
    unfold b1, b2 in E. rewrite !set_digits_other in E; auto.
Qed.

(** The table is a permutation of the ranks. *)
Theorem permute_table_perm : forall m t t',
  wf m t -> wf m t' -> same_local_shape m t t' ->
  Permutation (permute_table m t t') (seq 0 (ndevices m)).
Proof.
  intros m t t' Ht Ht' Hs. assert (Hm : wf_mesh m) by apply Ht.
  unfold permute_table. apply NoDup_Permutation_bis.
  - apply NoDup_map_on; [|apply seq_NoDup].
    intros r1 r2 Hr1 Hr2 Heq. apply in_seq in Hr1. apply in_seq in Hr2.
    assert (V1 := perm_src_valid m t t' _ Ht Ht' Hs (coords_of_rank_valid m r1 Hm)).
    assert (V2 := perm_src_valid m t t' _ Ht Ht' Hs (coords_of_rank_valid m r2 Hm)).
    assert (E : forall a, a < length m -> coords_of_rank m r1 a = coords_of_rank m r2 a).
    { apply (perm_src_inj m t t'); auto using coords_of_rank_valid.
      intros a Ha. rewrite <- (coords_of_rank_rank m _ Hm V1 a Ha), Heq.
      apply coords_of_rank_rank; auto. }
    rewrite <- (rank_coords_of_rank m r1), <- (rank_coords_of_rank m r2) by (auto; lia).
    unfold rank. apply mr_ext. intros a Ha. apply E. unfold all_axes in Ha. apply in_seq in Ha. lia.
  - rewrite map_length. lia.
  - intros x Hx. apply in_map_iff in Hx. destruct Hx as [r [<- Hr]]. apply in_seq. split; [lia|].
    simpl. apply rank_lt, perm_src_valid; auto. apply coords_of_rank_valid; auto.
Qed.

(** As many fixed points as possible: every device whose block does not
    change keeps its data (no bijection can fix any other device). *)
Theorem perm_src_fixed : forall m t t' c,
  wf m t -> wf m t' -> same_local_shape m t t' -> valid m c ->
  blocks m t c = blocks m t' c -> forall a, a < length m -> perm_src m t t' c a = c a.
Proof.
  intros m t t' c Ht Ht' Hs Hc Hbl. assert (Hm : wf_mesh m) by apply Ht.
  assert (Hmr : mr m (used t) c = mr m (used t') c).
  { rewrite !used_concat. apply mr_concat_eq.
    - destruct Ht as [_ [HF _]], Ht' as [_ [HF' _]], Hs. symmetry. apply dims_nprod; auto.
    - rewrite <- !blocks_map. auto. }
  set (b := set_digits m (used t) c (mr m (used t') c)).
  assert (Hb : forall a, a < length m -> b a = c a).
  { intros a Ha. unfold b. rewrite <- Hmr. apply set_digits_self; auto; [apply Ht|].
    intros; used_lt. }
  assert (Vb : valid m b) by (unfold b; apply set_digits_valid; auto).
  unfold perm_src. fold b.
  set (X := gained m t t'). set (Y := gained m t' t). set (N := nprod m X).
  assert (HN : 0 < N) by (apply nprod_pos; auto; apply gained_lt).
  assert (EY : mr m Y b = mr m Y c) by (apply mr_ext; intros; apply Hb; eapply gained_lt; eauto).
  assert (EX : mr m X c = mr m X b) by (apply mr_ext; intros; symmetry; apply Hb; eapply gained_lt; eauto).
  rewrite EY. replace (mr m Y c + N - mr m Y c + mr m X c) with (mr m X c + 1 * N) by lia.
  rewrite Nat.mod_add by lia. rewrite Nat.mod_small.
  2:{ apply mr_lt. intros; apply Hc; eapply gained_lt; eauto. }
  intros a Ha. rewrite EX, set_digits_self; auto.
  - apply gained_NoDup.
  - apply gained_lt.
Qed.
