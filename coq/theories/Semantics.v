(** Data semantics: what each device holds, and where every element of a
    device's new local array comes from when a collective runs. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Permute.
Import ListNotations.

(** Local indices: one natural per dimension, within the local shape. *)
Definition in_range (m : mesh) (t : atype) (i : list nat) : Prop :=
  Forall2 (fun D k => k < lsize m D) t i.

(** The global index that local index [i] of device [c] holds under [t]. *)
Definition gindex (m : mesh) (t : atype) (c : coords) (i : list nat) : list nat :=
  map (fun Dk => gidx m (fst Dk) c (snd Dk)) (combine t i).

(** The [t] distribution of a global array [A]: device [c]'s local array. *)
Definition local {V} (A : list nat -> V) (m : mesh) (t : atype) (c : coords) (i : list nat) : V :=
  A (gindex m t c i).

Definition dflt : dim := mkdim [] 1.

(** Data movement of each collective as the spec describes it: the device and
    local index that the element at local index [i] of device [c] comes from.
    - gather: piece [k = i_d / l] of the result comes from the [k]-th device of
      the group along [xs] (concatenation in group order);
    - slice: device [c] keeps piece [mr xs c] of its block;
    - all-to-all: piece [k] along [d] comes from the [k]-th device of the group,
      which sent its piece number [mr xs c] along [e];
    - permute: the whole local array of [perm_src c]. *)
Definition source (m : mesh) (t : atype) (op : coll) (t' : atype) (c : coords) (i : list nat)
  : coords * list nat :=
  match op with
  | AllGather d xs =>
      let l := lsize m (nth d t dflt) in
      let k := nth d i 0 in
      (set_digits m xs c (k / l), set_nth i d (k mod l))
  | DynSlice d xs =>
      let l' := lsize m (nth d t' dflt) in
      (c, set_nth i d (mr m xs c * l' + nth d i 0))
  | AllToAll d e xs =>
      let l := lsize m (nth d t dflt) in
      let le' := lsize m (nth e t' dflt) in
      let k := nth d i 0 in
      (set_digits m xs c (k / l), set_nth (set_nth i d (k mod l)) e (mr m xs c * le' + nth e i 0))
  | AllPermute _ => (perm_src m t t' c, i)
  end.

(** * Helpers for the soundness proof *)

Lemma Forall2_nth_iff : forall A B (P : A -> B -> Prop) l1 l2 d1 d2,
  Forall2 P l1 l2 <->
  length l2 = length l1 /\ forall j, j < length l1 -> P (nth j l1 d1) (nth j l2 d2).
Proof.
  intros A B P l1. induction l1 as [|x l1 IH]; intros [|y l2] d1 d2; split; intros H.
  - split; auto. simpl; intros; lia.
  - constructor.
  - inversion H.
  - destruct H as [H _]. discriminate.
  - inversion H.
  - destruct H as [H _]. discriminate.
  - inversion H as [|? ? ? ? Hxy Hrest]; subst. apply (IH l2 d1 d2) in Hrest.
    destruct Hrest as [Hl Hn]. split; [simpl; lia|]. intros [|j] Hj; simpl; auto.
    apply Hn. simpl in Hj. lia.
  - destruct H as [Hl Hn]. constructor; [apply (Hn 0); simpl; lia|].
    apply (IH l2 d1 d2). simpl in Hl. split; [lia|]. intros j Hj. apply (Hn (S j)). simpl; lia.
Qed.

Lemma in_range_iff : forall m t i, in_range m t i <->
  length i = length t /\ forall j, j < length t -> nth j i 0 < lsize m (nth j t dflt).
Proof. intros. exact (Forall2_nth_iff _ _ (fun D k => k < lsize m D) t i dflt 0). Qed.

Lemma gindex_nth : forall m t c i j, j < length t -> j < length i ->
  nth j (gindex m t c i) 0 = gidx m (nth j t dflt) c (nth j i 0).
Proof.
  intros m t c. unfold gindex.
  induction t as [|D t IH]; intros [|k i] [|j] Hj Hi; simpl in *; try lia; auto.
  apply IH; lia.
Qed.

Lemma gindex_length : forall m t c i, length i = length t -> length (gindex m t c i) = length t.
Proof. intros. unfold gindex. rewrite map_length, combine_length. lia. Qed.

(** Two global indices are equal when they agree dimension by dimension. *)
Lemma gindex_ext : forall m t c i t' c' i',
  length i = length t -> length t' = length t -> length i' = length t ->
  (forall j, j < length t -> gidx m (nth j t dflt) c (nth j i 0) = gidx m (nth j t' dflt) c' (nth j i' 0)) ->
  gindex m t c i = gindex m t' c' i'.
Proof.
  intros m t c i t' c' i' H1 H2 H3 H. apply nth_ext with (d := 0) (d' := 0).
  - rewrite !gindex_length; lia.
  - intros j Hj. rewrite gindex_length in Hj by auto. rewrite !gindex_nth by lia. auto.
Qed.

Lemma nth_set_nth_eq : forall A (l : list A) n x d, n < length l -> nth n (set_nth l n x) d = x.
Proof. intros A l. induction l; destruct n; simpl; intros; try lia; auto. apply IHl; lia. Qed.

Lemma nth_set_nth_neq : forall A (l : list A) n k x d, k <> n -> nth k (set_nth l n x) d = nth k l d.
Proof. intros A l. induction l; destruct n, k; simpl; intros; auto; try congruence. Qed.

Lemma nth_blocks : forall m t c j, nth j (blocks m t c) 0 = block m (nth j t dflt) c.
Proof. intros. unfold blocks. exact (map_nth (fun D => block m D c) t dflt j). Qed.

Lemma nodup_used_axes : forall t d D, NoDup (used t) -> nth_error t d = Some D -> NoDup (axes D).
Proof.
  unfold used. induction t as [|D0 t IH]; intros [|d] D Hnd HD; simpl in *; try discriminate.
  - injection HD as <-. apply NoDup_app_inv in Hnd. tauto.
  - apply NoDup_app_inv in Hnd. apply (IH d); tauto.
Qed.

(** Different dimensions of a well-formed type use disjoint axes. *)
Lemma used_disj : forall t j d Dj Dd a, NoDup (used t) -> j <> d ->
  nth_error t j = Some Dj -> nth_error t d = Some Dd -> In a (axes Dj) -> In a (axes Dd) -> False.
Proof.
  induction t as [|D0 t IH]; intros [|j] [|d] Dj Dd a Hnd Hjd Hj Hd Ha Hb;
    simpl in Hj, Hd; try discriminate; try lia;
    unfold used in Hnd; simpl in Hnd; apply NoDup_app_inv in Hnd; destruct Hnd as [_ [Hnd Hx]].
  - injection Hj as <-. apply (Hx a Ha). apply (in_used t d Dd); auto.
  - injection Hd as <-. apply (Hx a Hb). apply (in_used t j Dj); auto.
  - apply (IH j d Dj Dd a); auto.
Qed.

(** Changing coordinates on axes of dimension [d] leaves the other dimensions alone. *)
Lemma gidx_other : forall m t d Dd xs c k j x, wf m t -> nth_error t d = Some Dd ->
  (forall a, In a xs -> In a (axes Dd)) -> j <> d -> j < length t ->
  gidx m (nth j t dflt) (set_digits m xs c k) x = gidx m (nth j t dflt) c x.
Proof.
  intros m t d Dd xs c k j x Ht HD Hxs Hjd Hj. unfold gidx, block.
  rewrite (mr_ext m _ (set_digits m xs c k) c); auto.
  intros a Ha. apply set_digits_other. intro Hx.
  apply (used_disj t j d (nth j t dflt) Dd a); auto.
  - apply Ht.
  - apply nth_error_nth'; auto.
Qed.

Lemma sound_gather : forall m t d xs P g c i,
  wf m t -> nth_error t d = Some (mkdim (P ++ xs) g) -> valid m c ->
  in_range m (set_nth t d (mkdim P g)) i ->
  let (c', i') := source m t (AllGather d xs) (set_nth t d (mkdim P g)) c i in
  valid m c' /\ in_range m t i' /\ gindex m t c' i' = gindex m (set_nth t d (mkdim P g)) c i.
Proof.
  intros m t d xs P g c i Ht HD Hc Hi. unfold source. cbv beta iota zeta.
  assert (Hm : wf_mesh m) by apply Ht.
  assert (HwD : wf_dim m (mkdim (P ++ xs) g)) by (eapply wf_nth; eauto).
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
  rewrite HnD.
  assert (Hnd : NoDup (P ++ xs)) by (apply (nodup_used_axes t d (mkdim (P ++ xs) g)); [apply Ht|auto]).
  apply NoDup_app_inv in Hnd. destruct Hnd as [HndP [Hndx Hdisj]].
  destruct HwD as [Hg [HA Hdv]]. simpl in HA.
  assert (HxL : forall a, In a xs -> a < length m) by (intros; apply HA, in_or_app; auto).
  set (l := lsize m (mkdim (P ++ xs) g)). set (k := nth d i 0).
  assert (Hl : 0 < l) by (apply lsize_pos; auto; repeat split; auto).
  assert (E' : lsize m (mkdim P g) = l * nprod m xs) by (apply lsize_prefix; auto; repeat split; auto).
  apply in_range_iff in Hi. rewrite set_nth_length in Hi. destruct Hi as [Hlen Hb].
  assert (Hk : k < l * nprod m xs).
  { rewrite <- E'. specialize (Hb d Hdl). rewrite nth_set_nth_eq in Hb by auto. apply Hb. }
  assert (Hkl : k / l < nprod m xs) by (apply Nat.div_lt_upper_bound; lia).
  split; [|split].
  - apply set_digits_valid; auto.
  - apply in_range_iff. rewrite set_nth_length. split; auto.
    intros j Hj. destruct (Nat.eq_dec j d) as [->|Hne].
    + rewrite nth_set_nth_eq by lia. rewrite HnD. apply Nat.mod_upper_bound. lia.
    + rewrite nth_set_nth_neq by auto. specialize (Hb j Hj).
      rewrite nth_set_nth_neq in Hb by auto. auto.
  - apply gindex_ext; rewrite ?set_nth_length; auto.
    intros j Hj. destruct (Nat.eq_dec j d) as [->|Hne].
    + rewrite !nth_set_nth_eq by lia. rewrite HnD. unfold gidx, block. simpl axes.
      rewrite mr_app, set_digits_mr by (auto; intros; apply Hm; auto).
      rewrite (mr_ext m P (set_digits m xs c (k / l)) c).
      2:{ intros a Ha. apply set_digits_other. apply Hdisj; auto. }
      rewrite E'. fold l. pose proof (Nat.div_mod k l). nia.
    + rewrite !nth_set_nth_neq by auto.
      apply (gidx_other m t d (mkdim (P ++ xs) g)); auto.
      intros a Ha. simpl. apply in_or_app. auto.
Qed.

Lemma sound_slice : forall m t d xs D c i,
  wf m t -> nth_error t d = Some D -> (forall a, In a xs -> a < length m) -> NoDup xs ->
  Nat.divide (nprod m xs) (lsize m D) -> valid m c ->
  in_range m (set_nth t d (mkdim (axes D ++ xs) (gsize D))) i ->
  let (c', i') := source m t (DynSlice d xs) (set_nth t d (mkdim (axes D ++ xs) (gsize D))) c i in
  valid m c' /\ in_range m t i' /\
  gindex m t c' i' = gindex m (set_nth t d (mkdim (axes D ++ xs) (gsize D))) c i.
Proof.
  intros m t d xs D c i Ht HD HxL Hndx [z Hz] Hc Hi. unfold source. cbv beta iota zeta.
  assert (Hm : wf_mesh m) by apply Ht.
  assert (HwD : wf_dim m D) by (eapply wf_nth; eauto).
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (HnD : nth d t dflt = D) by (apply nth_error_nth; auto).
  rewrite nth_set_nth_eq by auto.
  assert (E' : lsize m (mkdim (axes D ++ xs) (gsize D)) = z) by (apply lsize_extend; auto).
  rewrite E'.
  apply in_range_iff in Hi. rewrite set_nth_length in Hi. destruct Hi as [Hlen Hb].
  set (k := nth d i 0).
  assert (Hk : k < z).
  { rewrite <- E'. specialize (Hb d Hdl). rewrite nth_set_nth_eq in Hb by auto. apply Hb. }
  assert (Hmx : mr m xs c < nprod m xs) by (apply mr_lt; intros; apply Hc; auto).
  split; [|split]; auto.
  - apply in_range_iff. rewrite set_nth_length. split; auto.
    intros j Hj. destruct (Nat.eq_dec j d) as [->|Hne].
    + rewrite nth_set_nth_eq by lia. rewrite HnD, Hz. nia.
    + rewrite nth_set_nth_neq by auto. specialize (Hb j Hj).
      rewrite nth_set_nth_neq in Hb by auto. auto.
  - apply gindex_ext; rewrite ?set_nth_length; auto.
    intros j Hj. destruct (Nat.eq_dec j d) as [->|Hne].
    + rewrite !nth_set_nth_eq by lia. rewrite HnD. unfold gidx, block. simpl axes.
      rewrite mr_app, E', Hz. fold k. ring.
    + rewrite !nth_set_nth_neq by auto. reflexivity.
Qed.

Lemma sound_alltoall : forall m t d e xs P g E c i,
  wf m t -> d <> e -> nth_error t d = Some (mkdim (P ++ xs) g) -> nth_error t e = Some E ->
  Nat.divide (nprod m xs) (lsize m E) -> valid m c ->
  let t' := set_nth (set_nth t d (mkdim P g)) e (mkdim (axes E ++ xs) (gsize E)) in
  in_range m t' i ->
  let (c', i') := source m t (AllToAll d e xs) t' c i in
  valid m c' /\ in_range m t i' /\ gindex m t c' i' = gindex m t' c i.
Proof.
  intros m t d e xs P g E c i Ht Hde HD HE [z Hz] Hc t' Hi. unfold source. cbv beta iota zeta.
  assert (Hm : wf_mesh m) by apply Ht.
  assert (HwD : wf_dim m (mkdim (P ++ xs) g)) by (eapply wf_nth; eauto).
  assert (HwE : wf_dim m E) by (eapply wf_nth; eauto).
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (Hel : e < length t) by (apply nth_error_Some; congruence).
  assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
  assert (HnE : nth e t dflt = E) by (apply nth_error_nth; auto).
  assert (Ht'l : length t' = length t) by (unfold t'; rewrite !set_nth_length; auto).
  assert (Ht'd : nth d t' dflt = mkdim P g).
  { unfold t'. rewrite nth_set_nth_neq by auto. apply nth_set_nth_eq; auto. }
  assert (Ht'e : nth e t' dflt = mkdim (axes E ++ xs) (gsize E)).
  { unfold t'. apply nth_set_nth_eq. rewrite set_nth_length. auto. }
  assert (Ht'o : forall j, j <> d -> j <> e -> nth j t' dflt = nth j t dflt).
  { intros j H1 H2. unfold t'. rewrite !nth_set_nth_neq; auto. }
  rewrite HnD, Ht'e.
  assert (Hnd : NoDup (P ++ xs)) by (apply (nodup_used_axes t d (mkdim (P ++ xs) g)); [apply Ht|auto]).
  apply NoDup_app_inv in Hnd. destruct Hnd as [HndP [Hndx Hdisj]].
  destruct HwD as [Hg [HA Hdv]]. simpl in HA.
  assert (HxL : forall a, In a xs -> a < length m) by (intros; apply HA, in_or_app; auto).
  assert (Hxd : forall a, In a xs -> In a (axes (mkdim (P ++ xs) g)))
    by (intros; simpl; apply in_or_app; auto).
  set (l := lsize m (mkdim (P ++ xs) g)).
  assert (Hl : 0 < l) by (apply lsize_pos; auto; repeat split; auto).
  assert (EL' : lsize m (mkdim P g) = l * nprod m xs) by (apply lsize_prefix; auto; repeat split; auto).
  assert (EE' : lsize m (mkdim (axes E ++ xs) (gsize E)) = z) by (apply lsize_extend; auto).
  rewrite EE'.
  apply in_range_iff in Hi. rewrite Ht'l in Hi. destruct Hi as [Hlen Hb].
  set (k := nth d i 0). set (ke := nth e i 0).
  assert (Hk : k < l * nprod m xs).
  { rewrite <- EL'. specialize (Hb d Hdl). rewrite Ht'd in Hb. apply Hb. }
  assert (Hke : ke < z).
  { rewrite <- EE'. specialize (Hb e Hel). rewrite Ht'e in Hb. apply Hb. }
  assert (Hkl : k / l < nprod m xs) by (apply Nat.div_lt_upper_bound; lia).
  assert (Hmx : mr m xs c < nprod m xs) by (apply mr_lt; intros; apply Hc; auto).
  set (c' := set_digits m xs c (k / l)).
  split; [|split].
  - apply set_digits_valid; auto.
  - apply in_range_iff. rewrite !set_nth_length. split; auto.
    intros j Hj. destruct (Nat.eq_dec j e) as [->|Hne].
    + rewrite nth_set_nth_eq by (rewrite set_nth_length; lia). rewrite HnE, Hz. nia.
    + rewrite nth_set_nth_neq by auto. destruct (Nat.eq_dec j d) as [->|Hnd].
      * rewrite nth_set_nth_eq by lia. rewrite HnD. apply Nat.mod_upper_bound. lia.
      * rewrite nth_set_nth_neq by auto. specialize (Hb j Hj). rewrite Ht'o in Hb; auto.
  - apply gindex_ext; rewrite ?set_nth_length; auto.
    intros j Hj. destruct (Nat.eq_dec j e) as [->|Hne].
    + rewrite nth_set_nth_eq by (rewrite set_nth_length; lia). rewrite Ht'e.
      unfold c'. rewrite (gidx_other m t d (mkdim (P ++ xs) g) xs c (k / l) e); auto.
      rewrite HnE. unfold gidx, block. simpl axes. rewrite mr_app, EE', Hz. fold ke. ring.
    + rewrite nth_set_nth_neq by auto. destruct (Nat.eq_dec j d) as [->|Hnd].
      * rewrite nth_set_nth_eq by lia. rewrite HnD, Ht'd. unfold gidx, block. simpl axes.
        rewrite mr_app. unfold c'. rewrite set_digits_mr by (auto; intros; apply Hm; auto).
        rewrite (mr_ext m P (set_digits m xs c (k / l)) c).
        2:{ intros a Ha. apply set_digits_other. apply Hdisj; auto. }
        rewrite EL'. fold l. fold k. pose proof (Nat.div_mod k l). nia.
      * rewrite !nth_set_nth_neq by auto. rewrite Ht'o by auto.
        apply (gidx_other m t d (mkdim (P ++ xs) g)); auto.
Qed.

Lemma sound_permute : forall m t t' c i,
  wf m t -> wf m t' -> map gsize t' = map gsize t -> map (lsize m) t' = map (lsize m) t ->
  valid m c -> in_range m t' i ->
  let (c', i') := source m t (AllPermute t') t' c i in
  valid m c' /\ in_range m t i' /\ gindex m t c' i' = gindex m t' c i.
Proof.
  intros m t t' c i Ht Ht' Hg Hl Hc Hi. unfold source. cbv beta iota zeta.
  assert (Hs : same_local_shape m t t') by (split; auto).
  assert (Hlen : length t' = length t)
    by (rewrite <- (map_length gsize t'), <- (map_length gsize t), Hg; auto).
  assert (HL : forall j, lsize m (nth j t' dflt) = lsize m (nth j t dflt)).
  { intros j. rewrite <- (map_nth (lsize m) t' dflt j), <- (map_nth (lsize m) t dflt j), Hl. auto. }
  apply in_range_iff in Hi. destruct Hi as [Hli Hb].
  split; [|split].
  - apply perm_src_valid; auto.
  - apply in_range_iff. split; [lia|]. intros j Hj. rewrite <- HL. apply Hb. lia.
  - apply gindex_ext; auto; try lia. intros j Hj. unfold gidx. rewrite HL. f_equal. f_equal.
    rewrite <- !nth_blocks. rewrite perm_src_blocks; auto.
Qed.

(** Soundness of every rule: the element a device receives is the element
    its new type says it holds, and it comes from a real device and a real
    local index. *)
Theorem source_sound : forall m t op t' c i,
  wf m t -> step m t op t' -> valid m c -> in_range m t' i ->
  let (c', i') := source m t op t' c i in
  valid m c' /\ in_range m t i' /\ gindex m t c' i' = gindex m t' c i.
Proof.
  intros m t op t' c i Ht Hs Hc Hi.
  destruct Hs as [d xs P g HD Hxs | d xs D HD Hxs HxL Hnd Hnu Hdiv
                 | d e xs P g E Hde HD HE Hxs Hdiv | t'' Ht'' Hg Hl].
  - apply sound_gather; auto.
  - apply sound_slice; auto.
  - apply sound_alltoall; auto.
  - apply sound_permute; auto.
Qed.

(** Hence, for any global array, moving the [t] distribution as specified
    yields its [t'] distribution. *)
Corollary movement_correct : forall V (A : list nat -> V) m t op t' c i,
  wf m t -> step m t op t' -> valid m c -> in_range m t' i ->
  let (c', i') := source m t op t' c i in
  local A m t c' i' = local A m t' c i.
Proof.
  intros V A m t op t' c i Ht Hs Hc Hi.
  pose proof (source_sound m t op t' c i Ht Hs Hc Hi) as H.
  destruct (source m t op t' c i) as [c' i']. destruct H as [_ [_ H]].
  unfold local. now rewrite H.
Qed.

(** Gathers and all-to-alls only read from devices of the same group: the
    source differs from [c] only on the axes the collective runs over. *)
Theorem source_in_group : forall m t op t' c i a,
  match op with
  | AllGather _ xs | AllToAll _ _ xs | DynSlice _ xs => ~ In a xs -> fst (source m t op t' c i) a = c a
  | AllPermute _ => True
  end.
Proof.
  intros. destruct op; simpl; auto; intros; apply set_digits_other; auto.
Qed.

(** Executable form for the runtime's tests: local indices in row-major order
    and, for every rank and every local element after the step, the rank and
    row-major local offset it comes from. *)
Fixpoint row_major (shape : list nat) : list (list nat) :=
  match shape with
  | [] => [[]]
  | n :: rest => flat_map (fun k => map (cons k) (row_major rest)) (seq 0 n)
  end.

Fixpoint offset (shape i : list nat) : nat :=
  match shape, i with
  | n :: rest, k :: i' => k * prod rest + offset rest i'
  | _, _ => 0
  end.

Definition movement (m : mesh) (t : atype) (op : coll) (t' : atype) : list nat :=
  flat_map (fun r =>
    flat_map (fun i => let (c', i') := source m t op t' (coords_of_rank m r) i in
                       [rank m c'; offset (map (lsize m) t) i'])
             (row_major (map (lsize m) t')))
    (seq 0 (ndevices m)).
