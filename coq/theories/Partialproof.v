(** Proofs for [Partial.v]: the typing function decides the rules, the
    rules keep partial types well formed, with no pending axis the
    representation relation is the ordinary distribution, and every step
    (hence every chain) takes a representation of a global array to a
    representation of the same array. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types Rules Checker Permute Semantics Exec Monoid Partial.
Import ListNotations.

(** * Coordinates *)

(** The coordinate that [set_digits] leaves at [a] depends on the old
    coordinates at [a] only. *)
Lemma set_digits_pt : forall m A c c' k a, c a = c' a -> set_digits m A c k a = set_digits m A c' k a.
Proof.
  intros m A. unfold set_digits. generalize (rev A) as R. clear A.
  induction R as [|b R IH]; intros c c' k a Hca; simpl; auto.
  apply IH. unfold upd. destruct (a =? b); auto.
Qed.

Lemma set_digits_pw : forall m A c c' k, (forall a, c a = c' a) ->
  forall a, set_digits m A c k a = set_digits m A c' k a.
Proof. intros m A c c' k H a. apply set_digits_pt, H. Qed.

(** Writing digits on disjoint axes commutes. *)
Lemma set_digits_comm : forall m A B c ka kb, (forall a, In a A -> ~ In a B) ->
  forall a, set_digits m A (set_digits m B c kb) ka a = set_digits m B (set_digits m A c ka) kb a.
Proof.
  intros m A B c ka kb Hdisj a. destruct (in_dec Nat.eq_dec a A) as [HaA|HaA].
  - rewrite (set_digits_other m B _ kb a) by (apply Hdisj; auto).
    apply set_digits_pt. apply set_digits_other. apply Hdisj; auto.
  - rewrite (set_digits_other m A _ ka a HaA). symmetry.
    apply set_digits_pt. apply set_digits_other; auto.
Qed.

Lemma div_div_any : forall a b c, a / b / c = a / (b * c).
Proof.
  intros a b c. destruct (Nat.eq_dec b 0) as [->|Hb]; [destruct c; reflexivity|].
  destruct (Nat.eq_dec c 0) as [->|Hc]; [rewrite Nat.mul_0_r; reflexivity|].
  apply Nat.div_div; auto.
Qed.

Lemma set_digits_rev_app : forall m R1 R2 c k,
  set_digits_rev m (R1 ++ R2) c k = set_digits_rev m R2 (set_digits_rev m R1 c k) (k / nprod m R1).
Proof.
  intros m R1. induction R1 as [|a R1 IH]; intros R2 c k; cbn [app set_digits_rev].
  - replace (nprod m []) with 1 by reflexivity. rewrite Nat.div_1_r. reflexivity.
  - rewrite IH, nprod_cons, div_div_any. reflexivity.
Qed.

Lemma set_digits_rev_mul_add : forall m R c q r,
  set_digits_rev m R c (q * nprod m R + r) = set_digits_rev m R c r.
Proof.
  intros m R. induction R as [|a R IH]; intros c q r; simpl; auto.
  rewrite nprod_cons. destruct (Nat.eq_dec (asize m a) 0) as [E|E].
  - rewrite E, Nat.mul_0_l, Nat.mul_0_r, Nat.add_0_l. reflexivity.
  - replace (q * (asize m a * nprod m R) + r) with (r + q * nprod m R * asize m a) by ring.
    rewrite Nat.mod_add, Nat.div_add by auto. rewrite Nat.add_comm. apply IH.
Qed.

(** The number [q * n(B) + r] on [A ++ B]: [r] on [B], [q] on [A]. *)
Lemma set_digits_app_split : forall m A B c q r, r < nprod m B ->
  set_digits m (A ++ B) c (q * nprod m B + r) = set_digits m A (set_digits m B c r) q.
Proof.
  intros m A B c q r Hr. unfold set_digits. rewrite rev_app_distr, set_digits_rev_app.
  assert (E : nprod m (rev B) = nprod m B) by (apply nprod_perm, Permutation_sym, Permutation_rev).
  rewrite E. rewrite <- E at 1. rewrite set_digits_rev_mul_add.
  f_equal. rewrite Nat.div_add_l by lia. rewrite Nat.div_small by lia. lia.
Qed.

(** A device's global index depends on its coordinates on the used axes only. *)
Lemma gindex_coords : forall m t c c' i, (forall a, In a (used t) -> c a = c' a) ->
  gindex m t c i = gindex m t c' i.
Proof.
  intros m t c c' i H. unfold gindex. apply map_ext_in. intros [D k] Hin.
  apply in_combine_l in Hin. simpl. unfold gidx, block. f_equal. f_equal.
  apply mr_ext. intros a Ha. apply H. unfold used. apply in_flat_map. eauto.
Qed.

Lemma local_coords : forall V (A : list nat -> V) m t c c' i, (forall a, In a (used t) -> c a = c' a) ->
  local A m t c i = local A m t c' i.
Proof. intros. unfold local. f_equal. apply gindex_coords; auto. Qed.

(** * Reductions over groups of devices *)

Section Groups.
Context (M : cmonoid).

Lemma gsum_nil : forall m f c, gsum M m [] f c = f c.
Proof. intros m f c. unfold gsum. simpl. apply mop_unit_r. Qed.

(** Over [A ++ B]: over [B] of the sums over [A]. *)
Lemma gsum_app : forall m A B f c, gsum M m (A ++ B) f c = gsum M m B (gsum M m A f) c.
Proof.
  intros m A B f c. unfold gsum at 1. rewrite nprod_app, msum_seq_mul.
  transitivity (msum M (map (fun q => msum M (map (fun r => f (set_digits m A (set_digits m B c r) q))
                   (seq 0 (nprod m B)))) (seq 0 (nprod m A)))).
  - apply msum_ext. intros q _. apply msum_ext. intros r Hr. apply in_seq in Hr.
    rewrite set_digits_app_split by lia. reflexivity.
  - rewrite msum_swap. reflexivity.
Qed.

(** A function of devices that respects agreement of coordinates. *)
Definition fdev (m : mesh) (f : coords -> carrier M) : Prop :=
  forall c1 c2, valid m c1 -> (forall a, c1 a = c2 a) -> f c1 = f c2.

(** The sum does not depend on how [c] is written. *)
Lemma gsum_dev : forall m A f c c', wf_mesh m -> valid m c -> fdev m f -> (forall a, c a = c' a) ->
  gsum M m A f c = gsum M m A f c'.
Proof.
  intros m A f c c' Hm Hc Hf Hcc. unfold gsum. apply msum_ext. intros k _.
  apply Hf; [apply set_digits_valid; auto|]. apply set_digits_pw; auto.
Qed.

Lemma gsum_fdev : forall m A f, wf_mesh m -> fdev m f -> fdev m (gsum M m A f).
Proof. intros m A f Hm Hf c1 c2 Hc1 H. apply gsum_dev; auto. Qed.

(** The order of the axes of a group does not matter. *)
Lemma gsum_perm : forall m A B f c, wf_mesh m -> valid m c -> NoDup A ->
  (forall a, In a A -> a < length m) -> Permutation A B -> fdev m f ->
  gsum M m A f c = gsum M m B f c.
Proof.
  intros m A B f c Hm Hc HndA HrA Hp Hf.
  assert (HndB : NoDup B) by (eapply Permutation_NoDup; eauto).
  assert (HAB : forall a, In a A <-> In a B) by (intros a; split; apply Permutation_in; auto using Permutation_sym).
  assert (HrB : forall a, In a B -> a < length m) by (intros a Ha; apply HrA, HAB, Ha).
  assert (En : nprod m A = nprod m B) by (apply nprod_perm; auto).
  assert (HposA : forall a, In a A -> 0 < asize m a) by (intros; apply Hm, HrA; auto).
  assert (HposB : forall a, In a B -> 0 < asize m a) by (intros; apply Hm, HrB; auto).
  set (n := nprod m A). set (s := fun k => mr m B (set_digits m A c k)).
  assert (Hv : forall k, valid m (set_digits m A c k)) by (intros; apply set_digits_valid; auto).
  assert (Hs : forall k, s k < n).
  { intros k. unfold s, n. rewrite En. apply mr_lt. intros a Ha. apply Hv, HrB, Ha. }
  assert (Hpt : forall k, k < n -> forall a, set_digits m B c (s k) a = set_digits m A c k a).
  { intros k Hk a. destruct (in_dec Nat.eq_dec a B) as [Ha|Ha].
    - apply (mr_inj m B); auto.
      + intros b Hb. split; [apply set_digits_valid|apply Hv]; auto.
      + unfold s. apply set_digits_mr; auto. rewrite <- En. apply Hs.
    - rewrite !set_digits_other; auto. rewrite HAB. auto. }
  unfold gsum. rewrite <- En. fold n.
  rewrite <- (msum_reindex M (fun k => f (set_digits m B c k)) s n).
  - apply msum_ext. intros k Hk. apply in_seq in Hk. apply Hf; auto. intros a. symmetry. apply Hpt. lia.
  - intros k _. apply Hs.
  - intros k1 k2 Hk1 Hk2 Heq.
    assert (E : forall a, In a A -> set_digits m A c k1 a = set_digits m A c k2 a).
    { intros a Ha. rewrite <- (Hpt k1 Hk1), <- (Hpt k2 Hk2), Heq. reflexivity. }
    rewrite <- (set_digits_mr m A c k1), <- (set_digits_mr m A c k2) by auto.
    apply mr_ext. exact E.
Qed.

(** A group sum whose terms are all the unit. *)
Lemma gsum_units : forall m A f c, (forall k, k < nprod m A -> f (set_digits m A c k) = munit M) ->
  gsum M m A f c = munit M.
Proof.
  intros m A f c H. unfold gsum. apply msum_units. intros x Hx. apply in_map_iff in Hx.
  destruct Hx as [k [<- Hk]]. apply in_seq in Hk. apply H. lia.
Qed.

End Groups.

(** * The representation relation *)

Lemma dev_fdev : forall M m t (x : coords -> list nat -> carrier M) i,
  dev_ext m t x -> in_range m t i -> fdev M m (fun c => x c i).
Proof. intros M m t x i Hx Hi c1 c2 Hc1 H12. apply Hx; auto. Qed.

(** Pointwise-equal states represent the same arrays. *)
Lemma represents_ext_state : forall M m pt A (x y : coords -> list nat -> carrier M),
  (forall c i, x c i = y c i) -> represents M m pt A x -> represents M m pt A y.
Proof.
  intros M m pt A x y Hxy [Hd Hs]. split.
  - intros c c' i Hc Hcc Hi. rewrite <- !Hxy. apply Hd; auto.
  - intros c i Hc Hi. rewrite <- Hs by auto. unfold gsum. apply msum_ext. intros k _. symmetry. apply Hxy.
Qed.

(** With no pending axis, representing [A] under [t] is holding the [t]
    distribution of [A], as [Semantics.local] and [Exec.exec_correct] state
    it. *)
Theorem represents_nil : forall M m t A (x : coords -> list nat -> carrier M), wf m t ->
  (represents M m (mkptype [] t) A x <-> forall c i, valid m c -> in_range m t i -> x c i = local A m t c i).
Proof.
  intros M m t A x Ht. unfold represents. cbn [paxes ptyp]. split.
  - intros [_ Hs] c i Hc Hi. rewrite <- Hs by auto. symmetry. apply (gsum_nil M m (fun c' => x c' i)).
  - intros H. split.
    + intros c c' i Hc Hcc Hi.
      assert (Hc' : valid m c') by (intros a Ha; rewrite <- Hcc; apply Hc; auto).
      rewrite !H by auto. apply local_coords. auto.
    + intros c i Hc Hi. rewrite gsum_nil. auto.
Qed.

(** Moving elements along axes outside the pending ones keeps a
    representation: the general form, for any source map that commutes with
    moving within a pending group and depends on the device only. *)
Lemma represents_move : forall M m P t t' (s : coords -> list nat -> coords)
  (j : coords -> list nat -> list nat) A (x : coords -> list nat -> carrier M),
  wf_mesh m ->
  (forall c i, valid m c -> in_range m t' i ->
     valid m (s c i) /\ in_range m t (j c i) /\ gindex m t (s c i) (j c i) = gindex m t' c i) ->
  (forall c i k, (forall a, s (set_digits m P c k) i a = set_digits m P (s c i) k a) /\
     j (set_digits m P c k) i = j c i) ->
  (forall c c' i, (forall a, c a = c' a) -> (forall a, s c i a = s c' i a) /\ j c i = j c' i) ->
  represents M m (mkptype P t) A x ->
  represents M m (mkptype P t') A (fun c i => x (s c i) (j c i)).
Proof.
  intros M m P t t' s j A x Hm Hsnd Hcomm Hdev [Hx Hsum]. cbn [paxes ptyp] in *. split; cbn [paxes ptyp].
  - intros c c' i Hc Hcc Hi. destruct (Hsnd c i Hc Hi) as [Hv [Hr _]].
    destruct (Hdev c c' i Hcc) as [Hs Hj]. rewrite <- Hj. apply Hx; auto.
  - intros c i Hc Hi. destruct (Hsnd c i Hc Hi) as [Hv [Hr Hg]].
    unfold local. rewrite <- Hg. fold (local A m t (s c i) (j c i)). rewrite <- Hsum by auto.
    unfold gsum. apply msum_ext. intros k _. destruct (Hcomm c i k) as [Hs Hj]. rewrite Hj.
    symmetry. apply Hx; [apply set_digits_valid; auto|intros a; symmetry; apply Hs|auto].
Qed.

(** * The four collectives on partial types *)

Lemma perm_src_dev : forall m t t' c c', (forall a, c a = c' a) ->
  forall a, perm_src m t t' c a = perm_src m t t' c' a.
Proof.
  intros m t t' c c' H a. unfold perm_src. cbv zeta.
  rewrite (mr_ext m (used t') c c') by auto.
  set (b := set_digits m (used t) c (mr m (used t') c')).
  set (b' := set_digits m (used t) c' (mr m (used t') c')).
  assert (Hb : forall a, b a = b' a) by (apply set_digits_pw; auto).
  rewrite (mr_ext m (gained m t' t) b b') by auto.
  rewrite (mr_ext m (gained m t' t) c c'), (mr_ext m (gained m t t') c c') by auto.
  apply set_digits_pw. auto.
Qed.

(** Where an element comes from depends on the device only. *)
Lemma source_dev : forall m t op t' c c' i, (forall a, c a = c' a) ->
  (forall a, fst (source m t op t' c i) a = fst (source m t op t' c' i) a) /\
  snd (source m t op t' c i) = snd (source m t op t' c' i).
Proof.
  intros m t op t' c c' i H. destruct op as [d xs|d xs|d e xs|t1]; cbn [source fst snd].
  - split; auto. apply set_digits_pw; auto.
  - split; auto. rewrite (mr_ext m xs c c'); auto.
  - split; [apply set_digits_pw; auto|]. rewrite (mr_ext m xs c c'); auto.
  - split; auto. apply perm_src_dev; auto.
Qed.

(** The permute's device map commutes with moving along axes that neither
    type uses. *)
Lemma perm_src_commute : forall m t t' P c k,
  (forall a, In a P -> ~ In a (used t)) -> (forall a, In a P -> ~ In a (used t')) ->
  forall a, perm_src m t t' (set_digits m P c k) a = set_digits m P (perm_src m t t' c) k a.
Proof.
  intros m t t' P c k HPt HPt' a. unfold perm_src. cbv zeta.
  set (X := gained m t t'). set (Y := gained m t' t).
  assert (HX : forall a, In a X -> In a (used t')) by (intros b Hb; apply gained_spec in Hb; tauto).
  assert (HY : forall a, In a Y -> In a (used t)) by (intros b Hb; apply gained_spec in Hb; tauto).
  assert (Hc1 : forall B, (forall a, In a B -> ~ In a P) -> mr m B (set_digits m P c k) = mr m B c).
  { intros B HB. apply mr_ext. intros b Hb. apply set_digits_other. apply HB; auto. }
  rewrite (Hc1 (used t')) by (intros b Hb HbP; exact (HPt' b HbP Hb)).
  set (b := set_digits m (used t) c (mr m (used t') c)).
  assert (Hb1 : forall a, set_digits m (used t) (set_digits m P c k) (mr m (used t') c) a = set_digits m P b k a).
  { intros a'. unfold b. apply set_digits_comm. intros b' Hb' HbP. exact (HPt b' HbP Hb'). }
  rewrite (mr_ext m Y (set_digits m (used t) (set_digits m P c k) (mr m (used t') c)) b).
  2:{ intros b' Hb'. rewrite Hb1. apply set_digits_other. intro HbP. exact (HPt b' HbP (HY b' Hb')). }
  rewrite (Hc1 Y) by (intros b' Hb' HbP; exact (HPt b' HbP (HY b' Hb'))).
  rewrite (Hc1 X) by (intros b' Hb' HbP; exact (HPt' b' HbP (HX b' Hb'))).
  rewrite (set_digits_pw m X _ _ _ Hb1 a).
  apply set_digits_comm. intros b' Hb' HbP. exact (HPt' b' HbP (HX b' Hb')).
Qed.

(** Every collective's source map commutes with moving within a group of
    axes that neither type uses. *)
Lemma source_commute : forall m t op t' P c i k, wf m t -> step m t op t' ->
  (forall a, In a P -> ~ In a (used t)) -> (forall a, In a P -> ~ In a (used t')) ->
  (forall a, fst (source m t op t' (set_digits m P c k) i) a = set_digits m P (fst (source m t op t' c i)) k a) /\
  snd (source m t op t' (set_digits m P c k) i) = snd (source m t op t' c i).
Proof.
  intros m t op t' P c i k Ht Hs HPt HPt'.
  assert (Hmr : forall B, (forall a, In a B -> ~ In a P) -> mr m B (set_digits m P c k) = mr m B c).
  { intros B HB. apply mr_ext. intros b Hb. apply set_digits_other. apply HB; auto. }
  destruct Hs as [d xs P0 g HD Hxs | d xs D HD Hxs HxL Hnd Hnu Hdiv
                 | d e xs P0 g E Hde HD HE Hxs Hdiv | t1 Ht1 Hg Hl]; cbn [source fst snd].
  - split; [|reflexivity]. intros a. apply set_digits_comm. intros b Hb HbP.
    apply (HPt b HbP). apply (in_used t d (mkdim (P0 ++ xs) g)); auto. simpl. apply in_or_app; auto.
  - split; [reflexivity|]. rewrite Hmr; auto. intros b Hb HbP. apply (HPt' b HbP).
    assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
    apply (in_used _ d (mkdim (axes D ++ xs) (gsize D))).
    + apply nth_error_set_nth_eq; auto.
    + simpl. apply in_or_app; auto.
  - assert (Hx : forall b, In b xs -> ~ In b P).
    { intros b Hb HbP. apply (HPt b HbP). apply (in_used t d (mkdim (P0 ++ xs) g)); auto.
      simpl. apply in_or_app; auto. }
    split; [|rewrite Hmr; auto]. intros a. apply set_digits_comm. auto.
  - split; [|reflexivity]. apply perm_src_commute; auto.
Qed.

(** The four collectives keep a representation when the new type, like the
    old one, leaves the pending axes unused: summing over a pending group
    commutes with moving data along the other axes. *)
Theorem pcoll_sound : forall M m P t op t' A (x : coords -> list nat -> carrier M),
  pwf m (mkptype P t) -> step m t op t' -> (forall a, In a P -> ~ In a (used t')) ->
  represents M m (mkptype P t) A x ->
  represents M m (mkptype P t') A (exec_step m t op t' x).
Proof.
  intros M m P t op t' A x [Ht [HndP [HrP HPt]]] Hs HPt' Hx. cbn [paxes ptyp] in *.
  apply (represents_ext_state M m _ A (fun c i => x (fst (source m t op t' c i)) (snd (source m t op t' c i)))).
  { intros c i. unfold exec_step. destruct (source m t op t' c i); reflexivity. }
  apply (represents_move M m P t t'); auto.
  - apply Ht.
  - intros c i Hc Hi. pose proof (source_sound m t op t' c i Ht Hs Hc Hi) as H.
    destruct (source m t op t' c i) as [c' i']. exact H.
  - intros c i k. apply source_commute; auto.
  - intros c c' i H. apply source_dev; auto.
Qed.

(** * Reductions *)

Lemma remove_axes_In : forall xs P a, In a (remove_axes xs P) <-> In a P /\ ~ In a xs.
Proof. intros. unfold remove_axes. rewrite filter_In, negb_true_iff, memb_false. tauto. Qed.

Lemma remove_axes_NoDup : forall xs P, NoDup P -> NoDup (remove_axes xs P).
Proof. intros. apply NoDup_filter. auto. Qed.

Lemma perm_remove_axes : forall xs P, NoDup xs -> NoDup P -> (forall a, In a xs -> In a P) ->
  Permutation P (xs ++ remove_axes xs P).
Proof.
  intros xs P Hx HP Hin. apply NoDup_Permutation; auto.
  - apply nodup_app_intro; auto; [apply remove_axes_NoDup; auto|].
    intros a Ha Hf. apply remove_axes_In in Hf. tauto.
  - intros a. rewrite in_app_iff, remove_axes_In. split.
    + intros Ha. destruct (in_dec Nat.eq_dec a xs); tauto.
    + intros [Ha|[Ha _]]; auto.
Qed.

(** Summing over the pending group of the reduced axes [xs] and then over
    the group of the axes still pending is summing over the whole group. *)
Lemma gsum_reduce : forall M m P xs f c, wf_mesh m -> valid m c -> NoDup P ->
  (forall a, In a P -> a < length m) -> NoDup xs -> (forall a, In a xs -> In a P) -> fdev M m f ->
  gsum M m (remove_axes xs P) (gsum M m xs f) c = gsum M m P f c.
Proof.
  intros M m P xs f c Hm Hc HndP HrP Hnd Hin Hf. rewrite <- gsum_app.
  symmetry. apply gsum_perm; auto. apply perm_remove_axes; auto.
Qed.

(** All-reduce over pending axes [xs]: the reduced axes become replicated. *)
Theorem allreduce_sound : forall M m P t xs A (x : coords -> list nat -> carrier M),
  pwf m (mkptype P t) -> NoDup xs -> (forall a, In a xs -> In a P) ->
  represents M m (mkptype P t) A x ->
  represents M m (mkptype (remove_axes xs P) t) A
    (pexec_step M m (mkptype P t) (AllReduce xs) (mkptype (remove_axes xs P) t) x).
Proof.
  intros M m P t xs A x [Ht [HndP [HrP HPt]]] Hnd Hin [Hx Hsum]. cbn [pexec_step paxes ptyp] in *.
  assert (Hm : wf_mesh m) by apply Ht.
  split; cbn [paxes ptyp].
  - intros c c' i Hc Hcc Hi. apply gsum_dev; auto. apply (dev_fdev M m t); auto.
  - intros c i Hc Hi. rewrite gsum_reduce; auto. apply (dev_fdev M m t); auto.
Qed.

(** Reduce-scatter over pending axes [xs] along dimension [d]: the reduced
    axes shard [d] at its minor end. *)
Theorem reducescatter_sound : forall M m P t d xs D A (x : coords -> list nat -> carrier M),
  pwf m (mkptype P t) -> nth_error t d = Some D -> xs <> [] -> NoDup xs ->
  (forall a, In a xs -> In a P) -> Nat.divide (nprod m xs) (lsize m D) ->
  let pt' := mkptype (remove_axes xs P) (set_nth t d (mkdim (axes D ++ xs) (gsize D))) in
  represents M m (mkptype P t) A x ->
  represents M m pt' A (pexec_step M m (mkptype P t) (ReduceScatter d xs) pt' x).
Proof.
  intros M m P t d xs D A x [Ht [HndP [HrP HPt]]] HD Hxs Hnd Hin Hdiv pt' [Hx Hsum].
  unfold pt' in *. clear pt'. cbn [pexec_step paxes ptyp] in *.
  set (t' := set_nth t d (mkdim (axes D ++ xs) (gsize D))).
  assert (Hm : wf_mesh m) by apply Ht.
  assert (Hst : step m t (DynSlice d xs) t').
  { apply step_slice; auto; intros a Ha; first [apply HrP, Hin, Ha | apply HPt, Hin, Ha]. }
  set (j := fun c i => snd (source m t (DynSlice d xs) t' c i)).
  assert (Hsnd : forall c i, valid m c -> in_range m t' i ->
            in_range m t (j c i) /\ gindex m t c (j c i) = gindex m t' c i).
  { intros c i Hc Hi. pose proof (source_sound m t (DynSlice d xs) t' c i Ht Hst Hc Hi) as H.
    assert (Es : source m t (DynSlice d xs) t' c i = (c, j c i)) by reflexivity.
    rewrite Es in H. tauto. }
  assert (Hj : forall c i k, j (set_digits m (remove_axes xs P) c k) i = j c i).
  { intros c i k. unfold j. cbn [source snd].
    rewrite (mr_ext m xs _ c); auto. intros a Ha. apply set_digits_other.
    rewrite remove_axes_In. tauto. }
  assert (Hjd : forall c c' i, (forall a, c a = c' a) -> j c i = j c' i).
  { intros c c' i H. apply (source_dev m t (DynSlice d xs) t' c c' i H). }
  split; cbn [paxes ptyp].
  - intros c c' i Hc Hcc Hi. fold (j c i) (j c' i). rewrite <- (Hjd c c' i Hcc). apply gsum_dev; auto.
    apply (dev_fdev M m t); auto. apply Hsnd; auto.
  - intros c i Hc Hi. destruct (Hsnd c i Hc Hi) as [Hr Hg].
    change (gsum M m (remove_axes xs P) (fun c' => gsum M m xs (fun c'' => x c'' (j c' i)) c') c
            = local A m t' c i).
    transitivity (gsum M m (remove_axes xs P) (gsum M m xs (fun c' => x c' (j c i))) c).
    { unfold gsum at 1 3. apply msum_ext. intros k _. rewrite Hj. reflexivity. }
    rewrite gsum_reduce; auto; [|apply (dev_fdev M m t); auto].
    rewrite Hsum by auto. unfold local. rewrite Hg. reflexivity.
Qed.

(** To-partial over replicated axes [xs]: the device numbered 0 in each
    [xs]-group keeps its elements and the others hold the unit, so the
    group's reduction is the element they all held. *)
Theorem topartial_sound : forall M m P t xs A (x : coords -> list nat -> carrier M),
  pwf m (mkptype P t) -> (forall a, In a xs -> a < length m) -> NoDup xs ->
  (forall a, In a xs -> ~ In a (used t)) -> (forall a, In a xs -> ~ In a P) ->
  represents M m (mkptype P t) A x ->
  represents M m (mkptype (P ++ xs) t) A
    (pexec_step M m (mkptype P t) (ToPartial xs) (mkptype (P ++ xs) t) x).
Proof.
  intros M m P t xs A x [Ht [HndP [HrP HPt]]] HxL Hnd Hnu HnP [Hx Hsum]. cbn [pexec_step paxes ptyp] in *.
  assert (Hm : wf_mesh m) by apply Ht.
  assert (Hpos : forall a, In a xs -> 0 < asize m a) by (intros; apply Hm, HxL; auto).
  assert (Hmr : forall c r k, r < nprod m xs -> mr m xs (set_digits m P (set_digits m xs c r) k) = r).
  { intros c r k Hr. rewrite (mr_ext m xs _ (set_digits m xs c r)).
    - apply set_digits_mr; auto.
    - intros a Ha. apply set_digits_other. apply HnP; auto. }
  split; cbn [paxes ptyp].
  - intros c c' i Hc Hcc Hi. rewrite (mr_ext m xs c c') by auto.
    destruct (mr m xs c' =? 0); [apply Hx; auto|reflexivity].
  - intros c i Hc Hi. rewrite gsum_app. unfold gsum at 1.
    rewrite msum_seq_first.
    + transitivity (gsum M m P (fun c' => x c' i) (set_digits m xs c 0)).
      { unfold gsum. apply msum_ext. intros k _. rewrite Hmr; auto. apply nprod_pos; auto. }
      rewrite Hsum by (auto; apply set_digits_valid; auto).
      apply local_coords. intros a Ha. apply set_digits_other. intro Hax. exact (Hnu a Hax Ha).
    + apply nprod_pos; auto.
    + intros r Hr. apply gsum_units. intros k _. rewrite Hmr by lia.
      destruct (Nat.eqb_spec r 0); [lia|reflexivity].
Qed.

(** * Typing *)

(** [pwfb] decides well-formedness. *)
Theorem pwfb_spec : forall m pt, pwfb m pt = true <-> pwf m pt.
Proof.
  intros m [P t]. unfold pwfb, pwf. cbn [paxes ptyp].
  rewrite !andb_true_iff, wfb_spec, nodupb_spec, !forallb_forall. split.
  - intros [[[Ht Hnd] Hr] Hu]. split; [exact Ht|split; [exact Hnd|split]].
    + intros a Ha. apply Nat.ltb_lt, Hr, Ha.
    + intros a Ha. apply memb_false, negb_true_iff, Hu, Ha.
  - intros [Ht [Hnd [Hr Hu]]]. split; [split; [split; [exact Ht|exact Hnd]|]|].
    + intros a Ha. apply Nat.ltb_lt, Hr, Ha.
    + intros a Ha. apply negb_true_iff, memb_false, Hu, Ha.
Qed.

(** Every rule keeps a partial type well formed. *)
Theorem pstep_wf : forall m pt op pt', pwf m pt -> pstep m pt op pt' -> pwf m pt'.
Proof.
  intros m pt op pt' Hwf Hs. destruct Hwf as [Ht [HndP [HrP HPt]]].
  destruct Hs as [P t op t' Hst HPt' | P t xs Hxs Hnd Hin | P t d xs D HD Hxs Hnd Hin Hdiv
                 | P t xs Hxs HxL Hnd Hnu HnP]; cbn [paxes ptyp] in *.
  - split; [eapply step_wf; eauto|]. auto.
  - split; [auto|split; [apply remove_axes_NoDup; auto|split]].
    + intros a Ha. apply remove_axes_In in Ha. apply HrP. tauto.
    + intros a Ha. apply remove_axes_In in Ha. apply HPt. tauto.
  - assert (Hst : step m t (DynSlice d xs) (set_nth t d (mkdim (axes D ++ xs) (gsize D)))).
    { apply step_slice; auto; intros a Ha; first [apply HrP, Hin, Ha | apply HPt, Hin, Ha]. }
    split; [eapply step_wf; eauto|split; [apply remove_axes_NoDup; auto|split]].
    + intros a Ha. apply remove_axes_In in Ha. apply HrP. tauto.
    + intros a Ha Hu. apply remove_axes_In in Ha. destruct Ha as [HaP Hax].
      pose proof (used_set_nth_perm t d D (mkdim (axes D ++ xs) (gsize D)) HD) as Hp.
      assert (Hin' : In a ((axes (mkdim (axes D ++ xs) (gsize D))) ++ used t)).
      { apply (Permutation_in _ Hp). apply in_or_app. auto. }
      cbn [axes] in Hin'. rewrite <- app_assoc in Hin'. apply in_app_or in Hin' as [HaD|Hrest].
      * apply (HPt a HaP). apply (in_used t d D); auto.
      * apply in_app_or in Hrest as [Hax'|Hat]; [contradiction|exact (HPt a HaP Hat)].
  - split; [auto|split; [|split]].
    + apply nodup_app_intro; auto. intros a Ha Hb. exact (HnP a Hb Ha).
    + intros a Ha. apply in_app_or in Ha as [Ha|Ha]; auto.
    + intros a Ha. apply in_app_or in Ha as [Ha|Ha]; auto.
Qed.

Lemma find_memb_none : forall (f : nat -> bool) l a, find f l = None -> In a l -> f a = false.
Proof. intros f l a H Ha. exact (find_none f l H a Ha). Qed.

(** The function decides the relation. *)
Lemma reduce_error_none : forall P xs,
  reduce_error P xs = None <-> xs <> [] /\ NoDup xs /\ (forall a, In a xs -> In a P).
Proof.
  intros P xs. unfold reduce_error. split.
  - destruct xs as [|x xs']; [discriminate|]. intros H.
    destruct (nodupb (x :: xs')) eqn:ND; cbn [negb] in H; [|discriminate].
    destruct (find (fun a => negb (memb a P)) (x :: xs')) as [a|] eqn:F; [discriminate|].
    split; [discriminate|]. split; [apply nodupb_spec; exact ND|].
    intros a Ha. pose proof (find_memb_none _ _ a F Ha) as Hf. cbv beta in Hf.
    apply negb_false_iff, memb_spec in Hf. exact Hf.
  - intros [Hne [Hnd Hin]]. destruct xs as [|x xs']; [congruence|].
    assert (ND : nodupb (x :: xs') = true) by (apply nodupb_spec; exact Hnd). rewrite ND. cbn [negb].
    rewrite find_none_intro; [reflexivity|]. intros a Ha. apply negb_false_iff, memb_spec. auto.
Qed.

Theorem papply_sound : forall m pt op pt', pwf m pt -> papply m pt op = Ok pt' -> pstep m pt op pt'.
Proof.
  intros m [P t] op pt' Hwf H. destruct Hwf as [Ht [HndP [HrP HPt]]]. cbn [paxes ptyp] in *.
  assert (Hm : wf_mesh m) by apply Ht.
  destruct op as [c|xs|d xs|xs]; cbn [papply paxes ptyp] in H.
  - destruct (apply m t c) as [t'|e] eqn:Ha; [|discriminate].
    destruct (find (fun a => memb a (used t')) P) as [a|] eqn:F; [discriminate|].
    injection H as <-. apply pstep_coll.
    + apply apply_sound; auto.
    + intros a Ha' Hu. pose proof (find_memb_none _ _ a F Ha') as Hf. cbv beta in Hf.
      apply memb_false in Hf. contradiction.
  - destruct (reduce_error P xs) as [e|] eqn:E; [discriminate|].
    apply reduce_error_none in E as [Hne [Hnd Hin]].
    injection H as <-. apply pstep_allreduce; auto.
  - destruct (nth_error t d) as [D|] eqn:HD; [|discriminate].
    destruct (reduce_error P xs) as [e|] eqn:E; [discriminate|].
    apply reduce_error_none in E as [Hne [Hnd Hin]].
    destruct (lsize m D mod nprod m xs =? 0) eqn:Hmod; [|discriminate].
    injection H as <-. apply pstep_reducescatter; auto.
    apply Nat.eqb_eq in Hmod.
    exact (proj1 (mod_nprod_divide m xs _ Hm (fun a Ha => HrP a (Hin a Ha))) Hmod).
  - destruct xs as [|x xs']; [discriminate|].
    destruct (find (fun a => length m <=? a) (x :: xs')) as [a|] eqn:F1; [discriminate|].
    destruct (nodupb (x :: xs')) eqn:ND; cbn [negb] in H; [|discriminate].
    destruct (find (fun a => memb a (used t)) (x :: xs')) as [a|] eqn:F2; [discriminate|].
    destruct (find (fun a => memb a P) (x :: xs')) as [a|] eqn:F3; [discriminate|].
    injection H as <-. apply pstep_topartial.
    + discriminate.
    + intros a Ha. pose proof (find_memb_none _ _ a F1 Ha) as Hf. cbv beta in Hf.
      apply Nat.leb_gt in Hf. exact Hf.
    + apply nodupb_spec; auto.
    + intros a Ha Hu. pose proof (find_memb_none _ _ a F2 Ha) as Hf. cbv beta in Hf.
      apply memb_false in Hf. contradiction.
    + intros a Ha Hu. pose proof (find_memb_none _ _ a F3 Ha) as Hf. cbv beta in Hf.
      apply memb_false in Hf. contradiction.
Qed.

Theorem papply_complete : forall m pt op pt', pwf m pt -> pstep m pt op pt' -> papply m pt op = Ok pt'.
Proof.
  intros m pt op pt' Hwf Hs. destruct Hwf as [Ht [HndP [HrP HPt]]].
  assert (Hm : wf_mesh m) by apply Ht.
  destruct Hs as [P t c t' Hst HPt' | P t xs Hxs Hnd Hin | P t d xs D HD Hxs Hnd Hin Hdiv
                 | P t xs Hxs HxL Hnd Hnu HnP]; cbn [paxes ptyp] in *; cbn [papply paxes ptyp].
  - rewrite (apply_complete m t c t' Ht Hst). rewrite find_none_intro; [reflexivity|].
    intros a Ha. apply memb_false. auto.
  - rewrite (proj2 (reduce_error_none P xs) (conj Hxs (conj Hnd Hin))). reflexivity.
  - rewrite HD, (proj2 (reduce_error_none P xs) (conj Hxs (conj Hnd Hin))).
    assert (Hmod : lsize m D mod nprod m xs = 0).
    { exact (proj2 (mod_nprod_divide m xs _ Hm (fun a Ha => HrP a (Hin a Ha))) Hdiv). }
    rewrite Hmod. reflexivity.
  - destruct xs as [|x xs']; [congruence|].
    assert (ND : nodupb (x :: xs') = true) by (apply nodupb_spec; auto).
    rewrite find_none_intro by (intros a Ha; apply Nat.leb_gt, HxL, Ha).
    rewrite ND. cbn [negb].
    rewrite find_none_intro by (intros a Ha; apply memb_false, Hnu, Ha).
    rewrite find_none_intro by (intros a Ha; apply memb_false, HnP, Ha).
    reflexivity.
Qed.

Corollary papply_spec : forall m pt op pt', pwf m pt -> (papply m pt op = Ok pt' <-> pstep m pt op pt').
Proof. split; [apply papply_sound|apply papply_complete]; auto. Qed.

(** * Soundness of a step and of a chain *)

(** Every rule takes any representation of any global array to a
    representation of the same array under the new type. *)
Theorem pstep_sound : forall M m pt op pt' A (x : coords -> list nat -> carrier M),
  pwf m pt -> pstep m pt op pt' -> represents M m pt A x -> represents M m pt' A (pexec_step M m pt op pt' x).
Proof.
  intros M m pt op pt' A x Hwf Hs Hx.
  destruct Hs as [P t op t' Hst HPt' | P t xs Hxs Hnd Hin | P t d xs D HD Hxs Hnd Hin Hdiv
                 | P t xs Hxs HxL Hnd Hnu HnP].
  - apply pcoll_sound; auto.
  - apply allreduce_sound; auto.
  - apply reducescatter_sound; auto.
  - apply topartial_sound; auto.
Qed.

Lemma pchain_wf : forall m pt p pt', pwf m pt -> pchain m pt p pt' -> pwf m pt'.
Proof.
  intros m pt p pt' Hwf Hch. induction Hch as [pt|pt op pt1 p pt' Hs Hch IH]; auto.
  apply IH. eapply pstep_wf; eauto.
Qed.

Lemma pexec_cons_step : forall M m pt op pt1 p (x : coords -> list nat -> carrier M),
  pwf m pt -> pstep m pt op pt1 -> pexec M m pt (op :: p) x = pexec M m pt1 p (pexec_step M m pt op pt1 x).
Proof. intros M m pt op pt1 p x Hwf Hs. cbn [pexec]. now rewrite (papply_complete m pt op pt1 Hwf Hs). Qed.

(** A well-typed partial plan takes any representation of any global array
    to a representation of the same array under the type it ends at. *)
Theorem pexec_correct : forall M m pt p pt' A (x : coords -> list nat -> carrier M),
  pwf m pt -> pchain m pt p pt' -> represents M m pt A x -> represents M m pt' A (pexec M m pt p x).
Proof.
  intros M m pt p pt' A x Hwf Hch. revert x Hwf.
  induction Hch as [pt|pt op pt1 p pt' Hs Hch IH]; intros x Hwf Hx; [exact Hx|].
  rewrite (pexec_cons_step M m pt op pt1 p x Hwf Hs). apply IH.
  - eapply pstep_wf; eauto.
  - apply pstep_sound; auto.
Qed.

(** End to end, in the form of [Exec.exec_correct]: a well-typed partial
    plan from an ordinary type to an ordinary type (pending axes created
    and reduced on the way) takes the source distribution of any global
    array to its target distribution. *)
Theorem pexec_correct_nil : forall M (A : list nat -> carrier M) m t p t', wf m t ->
  pchain m (mkptype [] t) p (mkptype [] t') ->
  forall c i, valid m c -> in_range m t' i -> pexec M m (mkptype [] t) p (local A m t) c i = local A m t' c i.
Proof.
  intros M A m t p t' Ht Hch.
  assert (Hwf : pwf m (mkptype [] t)).
  { split; [exact Ht|split; [constructor|split]]; intros a Ha; destruct Ha. }
  assert (Hwf' : pwf m (mkptype [] t')) by (eapply pchain_wf; eauto).
  assert (Hx : represents M m (mkptype [] t) A (local A m t)) by (apply represents_nil; auto).
  pose proof (pexec_correct M m _ p _ A _ Hwf Hch Hx) as H.
  exact (proj1 (represents_nil M m t' A _ (proj1 Hwf')) H).
Qed.

(** On plans of the four collectives only, with nothing pending, the
    partial execution is [Exec.exec]. *)
Theorem pexec_plain : forall M m t p (x : coords -> list nat -> carrier M),
  pexec M m (mkptype [] t) (map PColl p) x = exec m t p x.
Proof.
  intros M m t p. revert t. induction p as [|op p IH]; intros t x; [reflexivity|].
  cbn [map pexec exec papply paxes ptyp]. destruct (apply m t op) as [t1|e]; [|reflexivity].
  cbn [find]. apply IH.
Qed.

(** * Traffic *)

(** An all-reduce is a reduce-scatter along any dimension it can slice
    followed by the all-gather back: the all-gather is well typed, the two
    end at the all-reduce's type, and [precv] of the all-reduce is what the
    two receive. *)
Theorem allreduce_rs_ag : forall m P t d xs pt',
  pwf m (mkptype P t) -> pstep m (mkptype P t) (ReduceScatter d xs) pt' ->
  step m (ptyp pt') (AllGather d xs) t /\
  pstep m (mkptype P t) (AllReduce xs) (mkptype (paxes pt') t) /\
  precv m (mkptype P t) (AllReduce xs) (mkptype (paxes pt') t) =
    precv m (mkptype P t) (ReduceScatter d xs) pt' + recv m (ptyp pt') (AllGather d xs) t.
Proof.
  intros m P t d xs pt' Hwf Hs. destruct Hwf as [Ht [HndP [HrP HPt]]]. cbn [paxes ptyp] in *.
  assert (Hm : wf_mesh m) by apply Ht.
  inversion Hs as [| |P1 t1 d1 xs1 D HD Hxs Hnd Hin Hdiv E1 E2 E3|]; subst.
  cbn [paxes ptyp precv recv].
  set (t' := set_nth t d (mkdim (axes D ++ xs) (gsize D))).
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (Et : set_nth t' d (mkdim (axes D) (gsize D)) = t).
  { unfold t'. apply nth_ext with (d := dflt) (d' := dflt); rewrite ?set_nth_length; auto.
    intros n Hn. destruct (Nat.eq_dec n d) as [->|Hne].
    - rewrite nth_set_nth_eq by (rewrite set_nth_length; auto). rewrite (nth_error_nth t d dflt HD).
      destruct D; reflexivity.
    - rewrite !nth_set_nth_neq by auto. reflexivity. }
  split; [|split].
  - rewrite <- Et at 1. apply step_gather; [|auto]. unfold t'. apply nth_error_set_nth_eq; auto.
  - apply pstep_allreduce; auto.
  - assert (HwD : wf_dim m D) by (eapply wf_nth; eauto).
    assert (Hpx : 0 < nprod m xs) by (apply nprod_pos; auto; intros a Ha; apply HrP, Hin, Ha).
    destruct Hdiv as [z Hz].
    assert (Hl : lsize m (mkdim (axes D ++ xs) (gsize D)) = z) by (apply lsize_extend; auto).
    assert (Hpos : 0 < z) by (pose proof (lsize_pos m D Hm HwD); nia).
    assert (Hsz : size m t' * lsize m D = size m t * z).
    { rewrite !size_prod. unfold t'. rewrite map_set_nth, Hl. apply prod_set_nth. apply map_nth_error. auto. }
    assert (E : size m t = size m t' * nprod m xs) by (rewrite Hz in Hsz; nia).
    rewrite E, Nat.div_mul by lia. nia.
Qed.

Lemma set_digits_rev_other : forall m R c k a, ~ In a R -> set_digits_rev m R c k a = c a.
Proof.
  intros m R. induction R as [|b R IH]; intros c k a Ha; simpl; auto.
  rewrite IH by (intro; apply Ha; simpl; auto). apply upd_neq. intro; subst; apply Ha; simpl; auto.
Qed.

(** On the axes it writes, [set_digits] forgets the old coordinates. *)
Lemma set_digits_in_indep : forall m A c c' k a, In a A -> set_digits m A c k a = set_digits m A c' k a.
Proof.
  intros m A c c' k a Ha. unfold set_digits. apply in_rev in Ha. revert c c' k Ha.
  generalize (rev A) as R. clear A. induction R as [|b R IH]; intros c c' k Ha; [destruct Ha|].
  simpl. destruct (in_dec Nat.eq_dec a R) as [HaR|HaR]; [apply IH; auto|].
  destruct Ha as [<-|Ha]; [|contradiction].
  rewrite !set_digits_rev_other by auto. rewrite !upd_eq. reflexivity.
Qed.

Lemma set_digits_twice : forall m A c j k a, set_digits m A (set_digits m A c j) k a = set_digits m A c k a.
Proof.
  intros m A c j k a. destruct (in_dec Nat.eq_dec a A) as [Ha|Ha].
  - apply set_digits_in_indep; auto.
  - rewrite !set_digits_other; auto.
Qed.

Lemma set_nth_set_nth_eq : forall A (l : list A) n u v, set_nth (set_nth l n u) n v = set_nth l n v.
Proof. intros A l. induction l as [|h l IH]; intros [|n] u v; simpl; auto. f_equal. apply IH. Qed.

(** ... and it computes the same local arrays: the all-gather of the
    reduce-scatter's output is, element by element, the all-reduce's. *)
Theorem allreduce_rs_ag_data : forall M m P t d xs pt' (x : coords -> list nat -> carrier M),
  pwf m (mkptype P t) -> pstep m (mkptype P t) (ReduceScatter d xs) pt' -> dev_ext m t x ->
  forall c i, valid m c -> in_range m t i ->
  exec_step m (ptyp pt') (AllGather d xs) t (pexec_step M m (mkptype P t) (ReduceScatter d xs) pt' x) c i
  = pexec_step M m (mkptype P t) (AllReduce xs) (mkptype (paxes pt') t) x c i.
Proof.
  intros M m P t d xs pt' x Hwf Hs Hx c i Hc Hi. destruct Hwf as [Ht [HndP [HrP HPt]]].
  cbn [paxes ptyp] in *. assert (Hm : wf_mesh m) by apply Ht.
  inversion Hs as [| |P1 t1 d1 xs1 D HD Hxs Hnd Hin Hdiv E1 E2 E3|]; subst.
  cbn [paxes ptyp pexec_step]. unfold exec_step. cbn [source fst snd].
  set (t' := set_nth t d (mkdim (axes D ++ xs) (gsize D))).
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (Hnd' : nth d t' dflt = mkdim (axes D ++ xs) (gsize D)) by (apply nth_set_nth_eq; auto).
  assert (HwD : wf_dim m D) by (eapply wf_nth; eauto).
  assert (Hpos : forall a, In a xs -> 0 < asize m a) by (intros a Ha; apply Hm, HrP, Hin, Ha).
  destruct Hdiv as [z Hz].
  assert (Hl : lsize m (mkdim (axes D ++ xs) (gsize D)) = z) by (apply lsize_extend; auto).
  assert (Hzp : 0 < z) by (pose proof (lsize_pos m D Hm HwD); nia).
  rewrite Hnd', Hl.
  apply in_range_iff in Hi. destruct Hi as [Hlen Hb].
  set (k := nth d i 0).
  assert (Hk : k < z * nprod m xs).
  { rewrite <- Hz. specialize (Hb d Hdl). rewrite (nth_error_nth t d dflt HD) in Hb. exact Hb. }
  assert (Hkz : k / z < nprod m xs) by (apply Nat.div_lt_upper_bound; lia).
  set (c1 := set_digits m xs c (k / z)).
  assert (Hmr : mr m xs c1 = k / z) by (apply set_digits_mr; auto).
  rewrite Hmr. rewrite nth_set_nth_eq by lia. rewrite set_nth_set_nth_eq.
  replace (k / z * z + k mod z) with k by (pose proof (Nat.div_mod k z); lia).
  rewrite set_nth_same by (apply nth_error_nth'; lia).
  unfold gsum. apply msum_ext. intros k' _. apply Hx.
  - apply set_digits_valid; auto. apply set_digits_valid; auto.
  - intros a. apply set_digits_twice.
  - apply in_range_iff. auto.
Qed.
