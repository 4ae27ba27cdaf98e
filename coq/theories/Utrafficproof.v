(** Every plan the uneven checker accepts reports traffic at least the
    lower bound of [Utraffic.v] ([ucheck_traffic_lower_bound]), by the
    argument of [Trafficproof.v] on valid positions: per step, the valid
    elements a device gets from another device are at most what [urecv]
    reports (it counts padded buffers, so it may count more); every valid
    target element a device did not hold validly in the source came from
    another device at some step; the ones it held are counted by [ukept].
    On even types the bound is [Traffic.lower_bound] ([ulower_bound_even]). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Permute Traffic Trafficproof.
From VS Require Import Uneven Unevenproof Uchecker Ucheckerproof Utraffic.
Import ListNotations.

(** * Valid positions *)

(** The valid positions of device [c] under [t] (its chunked buffer), each once. *)
Definition uvindices (m : mesh) (t : atype) (c : coords) : list (list nat) :=
  row_major (map (fun D => uvlen m D c) t).

Lemma uvindices_In : forall m t c i, In i (uvindices m t c) <-> uvalid_pos m t c i.
Proof.
  intros m t c i. unfold uvindices, uvalid_pos. rewrite row_major_In, Forall2_map_l_iff. reflexivity.
Qed.

Lemma uvindices_NoDup : forall m t c, NoDup (uvindices m t c).
Proof. intros. apply row_major_NoDup. Qed.

Lemma uvindices_length : forall m t c, length (uvindices m t c) = usize Chunked m t c.
Proof. intros. unfold uvindices. rewrite row_major_length. reflexivity. Qed.

Lemma nth_map_dflt : forall (f : dim -> nat) t j, j < length t -> nth j (map f t) 0 = f (nth j t dflt).
Proof.
  intros f t j Hj. rewrite (nth_indep _ 0 (f dflt)) by (rewrite map_length; auto).
  apply map_nth.
Qed.

(** A device's global indices are injective on positions of the right length. *)
Lemma ugindex_inj : forall m t c i1 i2, length i1 = length t -> length i2 = length t ->
  ugindex m t c i1 = ugindex m t c i2 -> i1 = i2.
Proof.
  intros m t c i1 i2 H1 H2 E. apply nth_ext with (d := 0) (d' := 0); [lia|].
  intros j Hj. assert (X : nth j (ugindex m t c i1) 0 = nth j (ugindex m t c i2) 0) by (rewrite E; auto).
  rewrite !ugindex_nth in X by lia. unfold ugidx in X. lia.
Qed.

(** Devices that agree on the axes of the mesh have the same blocks, hence
    the same valid positions and global indices. *)
Lemma ublock_dev_ext : forall m t c1 c2 D, wf_uneven m t -> In D t ->
  (forall a, a < length m -> c1 a = c2 a) -> block m D c1 = block m D c2.
Proof.
  intros m t c1 c2 D [_ [HF _]] HD H. rewrite Forall_forall in HF. destruct (HF D HD) as [_ Ha].
  unfold block. apply mr_ext. intros a Hin. apply H, Ha, Hin.
Qed.

Lemma uvalid_pos_dev_ext : forall m t c1 c2 i, wf_uneven m t ->
  (forall a, a < length m -> c1 a = c2 a) -> uvalid_pos m t c1 i -> uvalid_pos m t c2 i.
Proof.
  intros m t c1 c2 i Ht H Hi. apply uvalid_pos_iff in Hi as [Hl Hb]. apply uvalid_pos_iff.
  split; auto. intros j Hj. specialize (Hb j Hj). unfold uvlen in *.
  rewrite <- (ublock_dev_ext m t c1 c2); auto. apply nth_In; auto.
Qed.

Lemma ugindex_dev_ext : forall m t c1 c2 i, wf_uneven m t ->
  (forall a, a < length m -> c1 a = c2 a) -> ugindex m t c1 i = ugindex m t c2 i.
Proof.
  intros m t c1 c2 i Ht H. unfold ugindex. apply map_ext_in. intros [D k] Hin.
  apply in_combine_l in Hin. simpl. unfold ugidx. rewrite (ublock_dev_ext m t c1 c2 D); auto.
Qed.

(** * Per step: what a device receives from other devices *)

(** Position [i] of device [c]'s output is read from another device (fresh
    padding is not received). *)
Definition ufrom_other (m : mesh) (t : atype) (op : coll) (t' : atype) (c : coords)
  (i : list nat) : bool :=
  match usrc m t op t' c i with
  | Some (c', _) => negb (rank m c' =? rank m c)
  | None => false
  end.

(** How many valid positions of its output device [c] gets from other devices. *)
Definition ufrom_others (m : mesh) (t : atype) (op : coll) (t' : atype) (c : coords) : nat :=
  length (filter (ufrom_other m t op t' c) (uvindices m t' c)).

(** Writing a device's own piece number back gives a device of the same rank. *)
Lemma rank_set_digits_self : forall m xs c, wf_mesh m -> valid m c -> NoDup xs ->
  (forall a, In a xs -> a < length m) -> rank m (set_digits m xs c (mr m xs c)) = rank m c.
Proof.
  intros m xs c Hm Hc Hnd Hx. apply agree_rank_eq. intros a _. apply set_digits_self; auto.
Qed.

(** Gathers and all-to-alls: if every valid output position lies in a
    buffer of [N * l] along [d] (and [s] elsewhere), and comes from another
    device only when it is not in piece [r] (pieces of [l]) along [d], then
    at most [N - 1] pieces, [(N - 1) * prod s] elements, come from others. *)
Lemma ufrom_others_piece : forall m t op t' c d l N r s,
  0 < l -> r < N -> d < length s -> nth d s 0 = l ->
  (forall i, uvalid_pos m t' c i -> In i (row_major (set_nth s d (N * l)))) ->
  (forall i, uvalid_pos m t' c i -> ufrom_other m t op t' c i = true -> nth d i 0 / l <> r) ->
  ufrom_others m t op t' c <= (N - 1) * prod s.
Proof.
  intros m t op t' c d l N r s Hl Hr Hd Hsd Hin Hpiece. unfold ufrom_others.
  eapply Nat.le_trans.
  - apply (NoDup_incl_length (l := filter (ufrom_other m t op t' c) (uvindices m t' c))
             (l' := filter (fun i => negb (nth d i 0 / l =? r)) (row_major (set_nth s d (N * l))))).
    + apply NoDup_filter, uvindices_NoDup.
    + intros i Hi. apply filter_In in Hi as [Hi Ho]. apply uvindices_In in Hi.
      apply filter_In. split; [apply Hin; auto|].
      apply negb_true_iff, Nat.eqb_neq. apply Hpiece; auto.
  - rewrite (count_coord (fun k => negb (k / l =? r))) by (rewrite set_nth_length; auto).
    rewrite nth_set_nth_eq by auto. rewrite Nat.mul_comm, count_other_piece by auto.
    rewrite set_nth_set_nth.
    pose proof (prod_set_nth s d (l * N - l) _ (nth_error_nth' s 0 Hd)) as X. rewrite Hsd in X.
    replace (l * N - l) with ((N - 1) * l) in X |- * by (rewrite Nat.mul_sub_distr_r; lia).
    assert (X' : prod (set_nth s d ((N - 1) * l)) = (N - 1) * prod s).
    { apply (Nat.mul_cancel_r _ _ l); [lia|]. rewrite X. ring. }
    lia.
Qed.

(** The axes of dimension [d] under [t], split as a gather or an all-to-all
    reads them, and the block sizes of the two sides. *)
Lemma usplit_facts : forall m t d P xs g c, wf_uneven m t -> nth_error t d = Some (mkdim (P ++ xs) g) ->
  valid m c ->
  NoDup xs /\ (forall a, In a xs -> a < length m) /\ 0 < ucsize m (mkdim (P ++ xs) g) /\
  ucsize m (mkdim P g) <= nprod m xs * ucsize m (mkdim (P ++ xs) g) /\ mr m xs c < nprod m xs.
Proof.
  intros m t d P xs g c Ht HD Hc. assert (Hm : wf_mesh m) by apply Ht.
  pose proof (wf_uneven_nth m t d _ Ht HD) as [Hg HA]. simpl in Hg, HA.
  pose proof (nodup_axes m t d _ Ht HD) as Hnd. simpl in Hnd.
  apply NoDup_app_inv in Hnd. destruct Hnd as [_ [Hndx _]].
  assert (HxL : forall a, In a xs -> a < length m) by (intros; apply HA, in_or_app; auto).
  assert (HN : 0 < nprod m xs) by (apply nprod_pos; auto).
  assert (HNP : 0 < nprod m P) by (apply nprod_pos; auto; intros; apply HA, in_or_app; auto).
  rewrite ucsize_app by auto.
  assert (HP : 0 < ucsize m (mkdim P g)) by (apply csize_pos; auto).
  pose proof (csize_spec (ucsize m (mkdim P g)) (nprod m xs) HN) as [H1 _].
  repeat split; auto.
  - apply csize_pos; auto.
  - apply mr_lt. intros a Ha. apply Hc, HxL, Ha.
Qed.

Lemma ugather_bound : forall m t d xs P g c,
  wf_uneven m t -> nth_error t d = Some (mkdim (P ++ xs) g) -> valid m c ->
  ufrom_others m t (AllGather d xs) (set_nth t d (mkdim P g)) c <= (nprod m xs - 1) * usize_padded m t.
Proof.
  intros m t d xs P g c Ht HD Hc. assert (Hm : wf_mesh m) by apply Ht.
  destruct (usplit_facts m t d P xs g c Ht HD Hc) as [Hndx [HxL [Hl [HPl Hr]]]].
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
  set (l := ucsize m (mkdim (P ++ xs) g)) in *.
  apply (ufrom_others_piece m t _ _ c d l (nprod m xs) (mr m xs c)); auto.
  - rewrite map_length; auto.
  - rewrite nth_map_dflt, HnD by auto. reflexivity.
  - intros i Hi. apply row_major_In, (Forall2_nth_iff _ _ _ _ _ 0 0).
    apply uvalid_pos_iff in Hi as [Hil Hib]. rewrite set_nth_length in Hil, Hib.
    rewrite set_nth_length, map_length. split; auto. intros j Hj. specialize (Hib j Hj).
    destruct (Nat.eq_dec j d) as [->|Hne].
    + rewrite nth_set_nth_eq in * by (rewrite ?map_length; auto).
      pose proof (uvlen_le m (mkdim P g) c). lia.
    + rewrite nth_set_nth_neq in * by auto. rewrite nth_map_dflt by auto.
      pose proof (uvlen_le m (nth j t dflt) c). lia.
  - intros i _ Ho E. unfold ufrom_other in Ho. cbn [usrc usource] in Ho. rewrite HnD in Ho.
    fold l in Ho. rewrite E, rank_set_digits_self, Nat.eqb_refl in Ho by auto. discriminate.
Qed.

Lemma ualltoall_bound : forall m t d e xs P g E c,
  wf_uneven m t -> d <> e -> nth_error t d = Some (mkdim (P ++ xs) g) -> nth_error t e = Some E ->
  valid m c ->
  ufrom_others m t (AllToAll d e xs)
    (set_nth (set_nth t d (mkdim P g)) e (mkdim (axes E ++ xs) (gsize E))) c
  <= (nprod m xs - 1) * usize_padded m (set_nth t e (mkdim (axes E ++ xs) (gsize E))).
Proof.
  intros m t d e xs P g E c Ht Hde HD HE Hc. assert (Hm : wf_mesh m) by apply Ht.
  destruct (usplit_facts m t d P xs g c Ht HD Hc) as [Hndx [HxL [Hl [HPl Hr]]]].
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (Hel : e < length t) by (apply nth_error_Some; congruence).
  assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
  set (l := ucsize m (mkdim (P ++ xs) g)) in *.
  set (E' := mkdim (axes E ++ xs) (gsize E)).
  apply (ufrom_others_piece m t _ _ c d l (nprod m xs) (mr m xs c)); auto.
  - rewrite map_length, set_nth_length; auto.
  - rewrite nth_map_dflt by (rewrite set_nth_length; auto).
    rewrite nth_set_nth_neq, HnD by auto. reflexivity.
  - intros i Hi. apply row_major_In, (Forall2_nth_iff _ _ _ _ _ 0 0).
    apply uvalid_pos_iff in Hi as [Hil Hib]. rewrite !set_nth_length in Hil, Hib.
    rewrite !set_nth_length, map_length, set_nth_length. split; auto. intros j Hj. specialize (Hib j Hj).
    destruct (Nat.eq_dec j e) as [->|Hne].
    + rewrite nth_set_nth_eq in Hib by (rewrite set_nth_length; auto).
      rewrite nth_set_nth_neq by auto. rewrite nth_map_dflt by (rewrite set_nth_length; auto).
      rewrite nth_set_nth_eq by auto. pose proof (uvlen_le m E' c). lia.
    + rewrite nth_set_nth_neq in Hib by auto.
      destruct (Nat.eq_dec j d) as [->|Hnd].
      * rewrite nth_set_nth_eq in * by (rewrite ?map_length, ?set_nth_length; auto).
        pose proof (uvlen_le m (mkdim P g) c). lia.
      * rewrite !nth_set_nth_neq in * by auto. rewrite nth_map_dflt by (rewrite ?set_nth_length; auto).
        rewrite nth_set_nth_neq by auto. pose proof (uvlen_le m (nth j t dflt) c). lia.
  - intros i _ Ho Eq. unfold ufrom_other in Ho. cbn [usrc usource] in Ho.
    destruct (_ <? _) in Ho; [|discriminate]. rewrite HnD in Ho.
    fold l in Ho. rewrite Eq, rank_set_digits_self, Nat.eqb_refl in Ho by auto. discriminate.
Qed.

(** A slice reads from the device itself or writes fresh padding. *)
Lemma uslice_none : forall m t d xs t' c, ufrom_others m t (DynSlice d xs) t' c = 0.
Proof.
  intros m t d xs t' c. unfold ufrom_others. apply filter_length_none. intros i _.
  unfold ufrom_other. cbn [usrc usource]. destruct (_ <? _); [|reflexivity].
  rewrite Nat.eqb_refl. reflexivity.
Qed.

(** Permutes keep the block sizes, and [moves] only looks at the axes. *)
Lemma map_ucsize_eq : forall m t t', map gsize t' = map gsize t -> dnprods m t' = dnprods m t ->
  map (ucsize m) t' = map (ucsize m) t.
Proof.
  intros m t. unfold dnprods. induction t as [|D t IH]; intros [|D' t'] Hg Hn; simpl in *;
    try discriminate; auto.
  injection Hg as Hg1 Hg2. injection Hn as Hn1 Hn2. f_equal; auto.
  unfold ucsize. rewrite Hg1, Hn1. reflexivity.
Qed.

Lemma moves_shadow : forall m t t', moves m (shadow m t) (shadow m t') = moves m t t'.
Proof.
  intros m t. unfold moves, shadow.
  induction t as [|D t IH]; intros [|D' t']; simpl; auto. rewrite IH. reflexivity.
Qed.

Lemma upermute_bound : forall m t t' c, wf_uneven m t -> wf_uneven m t' ->
  map gsize t' = map gsize t -> dnprods m t' = dnprods m t -> valid m c ->
  ufrom_others m t (AllPermute t') t' c <= (if moves m t t' then usize_padded m t else 0).
Proof.
  intros m t t' c Ht Ht' Hg Hn Hc. destruct (moves m t t') eqn:Hmv.
  - unfold ufrom_others.
    pose proof (filter_length_split _ (ufrom_other m t (AllPermute t') t' c) (uvindices m t' c)) as S.
    rewrite uvindices_length in S. pose proof (usize_chunked_le m t' c) as L.
    unfold usize_padded in *. rewrite (map_ucsize_eq m t t') in L by auto. lia.
  - unfold ufrom_others. rewrite filter_length_none; [lia|]. intros i _. unfold ufrom_other. cbn [usrc].
    rewrite (agree_rank_eq m _ c), Nat.eqb_refl; [reflexivity|].
    pose proof (wf_shadow m t Ht) as Hs. pose proof (wf_shadow m t' Ht') as Hs'.
    rewrite <- perm_src_shadow. apply perm_src_fixed; auto; [apply shadow_same; auto|].
    rewrite !blocks_shadow.
    destruct (list_eq_dec Nat.eq_dec (blocks m t c) (blocks m t' c)) as [E|E]; auto.
    exfalso. assert (X : moves m (shadow m t) (shadow m t') = true).
    { apply moves_spec; auto. exists c. rewrite !blocks_shadow. auto. }
    rewrite moves_shadow in X. congruence.
Qed.

(** Per step, a device receives from other devices at most the valid
    elements [urecv] reports (which counts padded buffers). *)
Theorem ufrom_others_le_urecv : forall m t op t' c,
  wf_uneven m t -> ucstep m t op t' -> valid m c -> ufrom_others m t op t' c <= urecv m t op t'.
Proof.
  intros m t op t' c Ht Hs Hc.
  destruct Hs as [op t1 Hs|t1 Hw Hg Hn]; [|apply upermute_bound; auto].
  destruct Hs as [d xs P g HD Hxs Hok | d xs D HD Hxs HxL Hnd Hnu Hok
                 | d e xs P g E Hde HD HE Hxs Hokd Hoke]; cbn [urecv].
  - apply ugather_bound; auto.
  - rewrite uslice_none. lia.
  - assert (Hel : e < length t) by (apply nth_error_Some; congruence).
    rewrite nth_set_nth_eq by (rewrite set_nth_length; auto).
    apply ualltoall_bound; auto.
Qed.

(** * Provenance: what a device misses is received at some step *)

(** Valid elements that device [c] holds under [t] whose global index fails [h]. *)
Definition umissing (m : mesh) (h : list nat -> bool) (t : atype) (c : coords) : nat :=
  length (filter (fun i => negb (h (ugindex m t c i))) (uvindices m t c)).

(** The input position an output position is read from. *)
Definition upos (m : mesh) (t : atype) (op : coll) (t' : atype) (c : coords) (i : list nat) : list nat :=
  match usrc m t op t' c i with Some (_, i') => i' | None => [] end.

(** A valid element a device gets from itself was at a valid position of
    its own input holding the same global index ([usrc_sound]). *)
Lemma upos_self : forall m t op t' c i,
  wf_uneven m t -> ucstep m t op t' -> valid m c -> uvalid_pos m t' c i ->
  ufrom_other m t op t' c i = false ->
  uvalid_pos m t c (upos m t op t' c i) /\ ugindex m t c (upos m t op t' c i) = ugindex m t' c i.
Proof.
  intros m t op t' c i Ht Hs Hc Hi Ho. assert (Hm : wf_mesh m) by apply Ht.
  destruct (usrc_sound m t op t' c i Ht Hs Hc Hi) as [c' [i' [E [Hc' [Hv Hg]]]]].
  unfold ufrom_other in Ho. unfold upos. rewrite E in Ho |- *.
  apply negb_false_iff, Nat.eqb_eq in Ho.
  assert (Hag : forall a, a < length m -> c' a = c a) by (apply rank_eq_agree; auto).
  split.
  - apply (uvalid_pos_dev_ext m t c'); auto.
  - rewrite <- Hg. apply ugindex_dev_ext; auto. intros a Ha. symmetry. auto.
Qed.

Lemma umissing_step : forall m h t op t' c,
  wf_uneven m t -> ucstep m t op t' -> valid m c ->
  umissing m h t' c <= ufrom_others m t op t' c + umissing m h t c.
Proof.
  intros m h t op t' c Ht Hs Hc. unfold umissing, ufrom_others.
  eapply Nat.le_trans; [apply (filter_length_cover _ _ (ufrom_other m t op t' c))|].
  apply Nat.add_le_mono_l.
  apply (length_le_inj _ _ (upos m t op t' c)).
  - apply NoDup_filter, uvindices_NoDup.
  - intros x y Hx Hy E. apply filter_In in Hx, Hy.
    destruct Hx as [Hx Hpx], Hy as [Hy Hpy].
    apply andb_true_iff in Hpx as [_ Hox]. apply andb_true_iff in Hpy as [_ Hoy].
    apply negb_true_iff in Hox, Hoy. apply uvindices_In in Hx, Hy.
    destruct (upos_self m t op t' c x Ht Hs Hc Hx Hox) as [_ Gx].
    destruct (upos_self m t op t' c y Ht Hs Hc Hy Hoy) as [_ Gy].
    apply (ugindex_inj m t' c); [apply (proj1 (uvalid_pos_iff _ _ _ _) Hx)|apply (proj1 (uvalid_pos_iff _ _ _ _) Hy)|].
    rewrite <- Gx, <- Gy, E. reflexivity.
  - intros x Hx. apply filter_In in Hx. destruct Hx as [Hx Hpx].
    apply andb_true_iff in Hpx as [Hhx Hox]. apply negb_true_iff in Hox.
    apply uvindices_In in Hx.
    destruct (upos_self m t op t' c x Ht Hs Hc Hx Hox) as [Rx Gx].
    apply filter_In. split; [apply uvindices_In; auto|]. rewrite Gx. exact Hhx.
Qed.

(** Along a trace, what is missed at the end was missed at the start or
    received on the way. *)
Lemma umissing_trace : forall m h c t p ts rs, utrace m t p ts rs -> wf_uneven m t -> valid m c ->
  umissing m h (last ts t) c <= umissing m h t c + fold_right plus 0 rs.
Proof.
  intros m h c t p ts rs Htr. induction Htr as [t|t op t1 p ts rs Hs Htr IH]; intros Ht Hc.
  - simpl. lia.
  - pose proof (utrace_nonempty _ _ _ _ _ Htr) as Hne.
    rewrite last_cons_ne by exact Hne. rewrite (last_indep _ ts t t1) by exact Hne.
    pose proof (IH (ucstep_wf m t op t1 Ht Hs) Hc) as H1.
    pose proof (umissing_step m h t op t1 c Ht Hs Hc) as H2.
    pose proof (ufrom_others_le_urecv m t op t1 c Ht Hs Hc) as H3.
    cbn [fold_right]. lia.
Qed.

(** * Counting what a device holds validly in the source *)

(** The global index [g] lies in the valid part of device [c]'s block under [src]. *)
Fixpoint uholds (m : mesh) (src : atype) (c : coords) (g : list nat) : bool :=
  match src, g with
  | [], [] => true
  | D :: s, k :: g' => (ugidx m D c 0 <=? k) && (k <? ugidx m D c 0 + uvlen m D c) && uholds m s c g'
  | _, _ => false
  end.

Lemma ugindex_cons : forall m D t c k i,
  ugindex m (D :: t) c (k :: i) = ugidx m D c k :: ugindex m t c i.
Proof. reflexivity. Qed.

Lemma uholds_source : forall m src c i, uvalid_pos m src c i -> uholds m src c (ugindex m src c i) = true.
Proof.
  intros m src c i Hi. unfold uvalid_pos in Hi.
  induction Hi as [|D k t i Hk Hr IH]; [reflexivity|].
  rewrite ugindex_cons. cbn [uholds]. rewrite IH, andb_true_r. apply andb_true_iff.
  unfold ugidx. rewrite Nat.leb_le, Nat.ltb_lt. lia.
Qed.

(** The valid target elements a device holds validly in the source are
    counted by [ukept]. *)
Lemma count_uholds : forall m c src dst, length src = length dst ->
  length (filter (fun i => uholds m src c (ugindex m dst c i)) (uvindices m dst c)) = ukept m src dst c.
Proof.
  intros m c src dst. revert src. unfold uvindices, ukept.
  induction dst as [|E dst IH]; intros [|D src] Hlen; simpl in Hlen; try discriminate.
  - reflexivity.
  - cbn [map row_major combine fst snd prod fold_right]. fold (prod
      (map (fun DE => overlap (ugidx m (fst DE) c 0) (uvlen m (fst DE) c)
                              (ugidx m (snd DE) c 0) (uvlen m (snd DE) c)) (combine src dst))).
    rewrite (count_prod _ (fun k => (ugidx m D c 0 <=? ugidx m E c k) && (ugidx m E c k <? ugidx m D c 0 + uvlen m D c))
                        (fun i => uholds m src c (ugindex m dst c i))) by (intros; reflexivity).
    rewrite IH by lia. f_equal.
    rewrite (filter_ext_in _ (fun k => (ugidx m D c 0 <=? ugidx m E c 0 + k) && (ugidx m E c 0 + k <? ugidx m D c 0 + uvlen m D c))).
    + apply count_interval.
    + intros k _. replace (ugidx m E c k) with (ugidx m E c 0 + k) by (unfold ugidx; lia).
      reflexivity.
Qed.

(** * The lower bound *)

(** Per device: an accepted plan makes device [c] receive at least what it needs. *)
Theorem ucheck_traffic_need : forall m src dst p r c,
  ucheck m src dst p = Ok r -> valid m c -> uneed m src dst c <= fold_right plus 0 (ureceived r).
Proof.
  intros m src dst p r c Hchk Hc.
  apply ucheck_ok in Hchk as [[Hs [Hd Hg]] [Htr [Hlast _]]].
  pose proof (umissing_trace m (uholds m src c) c src p (utypes r) (ureceived r) Htr Hs Hc) as Hmiss.
  rewrite Hlast in Hmiss.
  assert (Hmiss0 : umissing m (uholds m src c) src c = 0).
  { unfold umissing. apply filter_length_none. intros i Hi. apply uvindices_In in Hi.
    rewrite uholds_source; auto. }
  assert (Hlen : length src = length dst).
  { rewrite <- (map_length gsize src), <- (map_length gsize dst), Hg. reflexivity. }
  pose proof (filter_length_split _ (fun i => uholds m src c (ugindex m dst c i)) (uvindices m dst c)) as S.
  rewrite count_uholds, uvindices_length in S by exact Hlen.
  unfold umissing in Hmiss, Hmiss0. unfold uneed. lia.
Qed.

(** **Traffic lower bound over uneven types**: every plan the uneven checker
    accepts makes the worst device receive, over all steps as reported,
    at least [ulower_bound]. *)
Theorem ucheck_traffic_lower_bound : forall m src dst p r,
  ucheck m src dst p = Ok r -> ulower_bound m src dst <= fold_right plus 0 (ureceived r).
Proof.
  intros m src dst p r Hchk. pose proof Hchk as Hchk'. apply ucheck_ok in Hchk' as [[Hs _] _].
  apply fold_max_devices; [apply Hs|]. intros c Hc. apply (ucheck_traffic_need m src dst p r); auto.
Qed.

(** * Holding less validly needs more *)

(** A global index [uholds] counts is at a valid position of the device's block. *)
Lemma uholds_valid : forall m t c g, uholds m t c g = true ->
  exists i, uvalid_pos m t c i /\ ugindex m t c i = g.
Proof.
  intros m t c. induction t as [|D t IH]; intros [|k g] H; cbn [uholds] in H; try discriminate.
  - exists []. split; [constructor|reflexivity].
  - apply andb_true_iff in H as [Hk Hg]. apply andb_true_iff in Hk as [Hlo Hhi].
    apply Nat.leb_le in Hlo. apply Nat.ltb_lt in Hhi.
    destruct (IH g Hg) as [i [Hi Ei]].
    exists ((k - ugidx m D c 0) :: i). split.
    + constructor; [|exact Hi]. lia.
    + rewrite ugindex_cons, Ei. f_equal. unfold ugidx in *. lia.
Qed.

(** Device [c] keeps at most as much of [dst] from [t1] as from [t] when every
    valid element it holds under [t1] it holds validly under [t]. *)
Lemma ukept_mono : forall m t t1 dst c, length t = length dst -> length t1 = length dst ->
  (forall i, uvalid_pos m t1 c i -> exists i', uvalid_pos m t c i' /\ ugindex m t c i' = ugindex m t1 c i) ->
  ukept m t1 dst c <= ukept m t dst c.
Proof.
  intros m t t1 dst c Hl Hl1 Hsub. rewrite <- !count_uholds by assumption.
  apply filter_length_mono. intros i _ Hh.
  destruct (uholds_valid m t1 c _ Hh) as [i1 [Hi1 Ei1]].
  destruct (Hsub i1 Hi1) as [i' [Hi' Ei']]. rewrite <- Ei1, <- Ei'. apply uholds_source. exact Hi'.
Qed.

(** ... so it needs at least as much, and so does the worst device. *)
Lemma ulower_bound_mono : forall m t t1 dst, wf_mesh m -> length t = length dst -> length t1 = length dst ->
  (forall c i, valid m c -> uvalid_pos m t1 c i ->
     exists i', uvalid_pos m t c i' /\ ugindex m t c i' = ugindex m t1 c i) ->
  (forall c, valid m c -> uneed m t dst c <= uneed m t1 dst c) /\
  ulower_bound m t dst <= ulower_bound m t1 dst.
Proof.
  intros m t t1 dst Hm Hl Hl1 Hsub.
  assert (Hc : forall c, valid m c -> uneed m t dst c <= uneed m t1 dst c).
  { intros c Hc. unfold uneed. pose proof (ukept_mono m t t1 dst c Hl Hl1 (fun i => Hsub c i Hc)). lia. }
  split; [exact Hc|].
  unfold ulower_bound. apply fold_max_le. intros x Hx. apply in_map_iff in Hx. destruct Hx as [r [<- Hr]].
  eapply Nat.le_trans; [apply Hc, coords_of_rank_valid, Hm|].
  apply fold_max_ge. apply in_map_iff. exists r. split; [reflexivity|exact Hr].
Qed.

(** After a slice a device holds validly only elements it held validly
    before (a slice reads from the device itself, [usrc_sound]). *)
Lemma uslice_held : forall m t d xs t1 c i, wf_uneven m t -> ucstep m t (DynSlice d xs) t1 -> valid m c ->
  uvalid_pos m t1 c i -> exists i', uvalid_pos m t c i' /\ ugindex m t c i' = ugindex m t1 c i.
Proof.
  intros m t d xs t1 c i Ht Hs Hc Hi.
  destruct (usrc_sound m t _ t1 c i Ht Hs Hc Hi) as [c' [i' [E [_ [Hv Hg]]]]].
  cbn [usrc usource] in E. destruct (_ <? _); [|discriminate]. injection E as <- <-. eauto.
Qed.

(** * Even types *)

(** On well-formed (even) types the uneven bound is the even one. *)
Lemma ukept_even : forall m src dst c, wf m src -> wf m dst -> valid m c ->
  ukept m src dst c = kept m src dst c.
Proof.
  intros m src dst c Hs Hd Hc. assert (Hm : wf_mesh m) by apply Hs.
  destruct Hs as [_ [HFs _]], Hd as [_ [HFd _]]. rewrite Forall_forall in HFs, HFd.
  unfold ukept, kept. f_equal. apply map_ext_in. intros [D E] HDE. cbn [fst snd].
  pose proof (HFs D (in_combine_l _ _ _ _ HDE)) as HD. pose proof (HFd E (in_combine_r _ _ _ _ HDE)) as HE.
  rewrite !uvlen_lsize, !ugidx_gidx by auto. reflexivity.
Qed.

Lemma uneed_even : forall m src dst c, wf m src -> wf m dst -> valid m c ->
  uneed m src dst c = need m src dst c.
Proof.
  intros m src dst c Hs Hd Hc. unfold uneed, need. rewrite ukept_even, usize_even by auto. reflexivity.
Qed.

Theorem ulower_bound_even : forall m src dst, wf m src -> wf m dst ->
  ulower_bound m src dst = lower_bound m src dst.
Proof.
  intros m src dst Hs Hd. unfold ulower_bound, lower_bound. f_equal. apply map_ext.
  intros r. apply uneed_even; auto. apply coords_of_rank_valid. apply Hs.
Qed.
