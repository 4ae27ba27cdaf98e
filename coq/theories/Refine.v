(** Refinement of a mesh: every axis split into sub-axes whose sizes
    multiply to the axis size, major first. Row-major ranks, blocks, local
    sizes and so every device's data are unchanged ([refine_local]), so a
    plan over the refined mesh runs on the same devices with the same data. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Semantics.
Import ListNotations.

(** One list of sub-axis sizes per axis. *)
Definition split := list (list nat).

Definition splits (m : mesh) (fs : split) : Prop := map prod fs = m.

Definition rmesh (fs : split) : mesh := concat fs.

(** The sub-axes of axis [a] in the refined mesh: consecutive, in order. *)
Definition offs (fs : split) (a : nat) : nat := length (concat (firstn a fs)).

Definition grp (fs : split) (a : nat) : list nat := seq (offs fs a) (length (nth a fs [])).

Definition rdim (fs : split) (D : dim) : dim := mkdim (flat_map (grp fs) (axes D)) (gsize D).

Definition rtype (fs : split) (t : atype) : atype := map (rdim fs) t.

(** [grp fs a] for every axis [a] at once (the sub-axes from offset [o]),
    for [rtype_fast]: [rtype] with each axis's sub-axes looked up in that
    table instead of recomputed ([rtype_fast_eq]). *)
Fixpoint grps_from (o : nat) (fs : split) : list (list nat) :=
  match fs with
  | [] => []
  | f :: fs' => seq o (length f) :: grps_from (o + length f) fs'
  end.

Definition rtype_fast (fs : split) (t : atype) : atype :=
  let G := grps_from 0 fs in
  map (fun D => mkdim (flat_map (fun a => nth a G []) (axes D)) (gsize D)) t.

Lemma grps_from_nth : forall fs o a, nth a (grps_from o fs) [] = seq (o + offs fs a) (length (nth a fs [])).
Proof.
  induction fs as [|f fs IH]; intros o [|a]; cbn [grps_from nth].
  - reflexivity.
  - reflexivity.
  - unfold offs. simpl. rewrite Nat.add_0_r. reflexivity.
  - rewrite IH. unfold offs. cbn [firstn concat]. rewrite app_length. f_equal. lia.
Qed.

Lemma rtype_fast_eq : forall fs t, rtype_fast fs t = rtype fs t.
Proof.
  intros fs t. unfold rtype_fast, rtype, rdim. apply map_ext. intros D. f_equal.
  apply flat_map_ext. intros a. rewrite grps_from_nth. reflexivity.
Qed.

(** * Arithmetic of mixed-radix digits *)

Lemma set_digits_lt : forall m A c k a, (forall b, In b A -> 0 < asize m b) -> In a A ->
  set_digits m A c k a < asize m a.
Proof.
  intros m A. induction A as [|b A IH] using rev_ind; intros c k a Hpos Ha; [inversion Ha|].
  rewrite set_digits_app_single. destruct (in_dec Nat.eq_dec a A) as [HaA|HaA].
  - apply IH; auto. intros; apply Hpos, in_or_app; auto.
  - rewrite set_digits_other by auto. apply in_app_or in Ha as [Ha|[<-|[]]]; [contradiction|].
    rewrite upd_eq. apply Nat.mod_upper_bound.
    assert (Hb : 0 < asize m b) by (apply Hpos, in_or_app; simpl; auto). lia.
Qed.

(** The number a device has on a run [B] of the axes [L ++ B ++ R] it was
    numbered over: the digits of [k] that [B] stands for. *)
Lemma mr_set_digits_mid : forall m L B R c k,
  NoDup (L ++ B ++ R) -> (forall b, In b (L ++ B ++ R) -> 0 < asize m b) ->
  k < nprod m (L ++ B ++ R) ->
  mr m B (set_digits m (L ++ B ++ R) c k) = (k / nprod m R) mod nprod m B.
Proof.
  intros m L B R c k Hnd Hpos Hk. set (c' := set_digits m (L ++ B ++ R) c k).
  assert (Hmr : mr m (L ++ B ++ R) c' = k) by (apply set_digits_mr; auto).
  assert (Hlt : forall X, incl X (L ++ B ++ R) -> mr m X c' < nprod m X).
  { intros X HX. apply mr_lt. intros a Ha. apply set_digits_lt; auto. }
  rewrite !mr_app, !nprod_app in Hmr.
  assert (HB := Hlt B (fun a Ha => in_or_app _ _ _ (or_intror (in_or_app _ _ _ (or_introl Ha))))).
  assert (HR := Hlt R (fun a Ha => in_or_app _ _ _ (or_intror (in_or_app _ _ _ (or_intror Ha))))).
  rewrite <- Hmr.
  replace (mr m L c' * (nprod m B * nprod m R) + (mr m B c' * nprod m R + mr m R c'))
    with ((mr m L c' * nprod m B + mr m B c') * nprod m R + mr m R c') by ring.
  rewrite Nat.div_add_l by lia. rewrite (Nat.div_small (mr m R c')) by lia. rewrite Nat.add_0_r.
  rewrite Nat.add_comm, Nat.mod_add by lia. symmetry. apply Nat.mod_small; lia.
Qed.

(** * The refined mesh *)

Lemma prod_concat : forall fs, prod (concat fs) = prod (map prod fs).
Proof. induction fs as [|f fs IH]; simpl; auto. rewrite prod_app, IH. reflexivity. Qed.

Lemma splits_length : forall m fs, splits m fs -> length fs = length m.
Proof. intros m fs <-. now rewrite map_length. Qed.

Lemma splits_asize : forall m fs a, splits m fs -> asize m a = prod (nth a fs []).
Proof.
  intros m fs a <-. rewrite asize_nth. change 1 with (prod []) at 1. apply (map_nth prod fs [] a).
Qed.

Lemma ndevices_rmesh : forall m fs, splits m fs -> ndevices (rmesh fs) = ndevices m.
Proof. intros m fs <-. unfold ndevices, rmesh. apply prod_concat. Qed.

(** * Lists of axes *)

Lemma nth_skipn_cons_aux : forall A (l : list A) a d, a < length l -> skipn a l = nth a l d :: skipn (S a) l.
Proof. intros A l. induction l as [|x l IH]; intros [|a] d H; simpl in *; try lia; auto. apply IH. lia. Qed.

Lemma firstn_S_nth : forall A (l : list A) a d, a < length l -> firstn (S a) l = firstn a l ++ [nth a l d].
Proof. intros A l. induction l as [|x l IH]; intros [|a] d H; simpl in *; try lia; auto. f_equal. apply IH. lia. Qed.

Lemma offs_S : forall fs a, a < length fs -> offs fs (S a) = offs fs a + length (nth a fs []).
Proof.
  intros fs a Ha. unfold offs. rewrite (firstn_S_nth _ fs a [] Ha), concat_app, app_length. simpl.
  rewrite app_nil_r. reflexivity.
Qed.

Lemma skipn_offs : forall fs b, skipn (offs fs b) (concat fs) = concat (skipn b fs).
Proof.
  intros fs b. unfold offs. rewrite <- (firstn_skipn b fs) at 2. rewrite concat_app.
  rewrite skipn_app, Nat.sub_diag, skipn_all. reflexivity.
Qed.

Lemma length_rmesh : forall fs b, length (rmesh fs) = offs fs b + length (concat (skipn b fs)).
Proof.
  intros fs b. unfold rmesh, offs. rewrite <- (firstn_skipn b fs) at 1. now rewrite concat_app, app_length.
Qed.

Lemma offs_le : forall fs a b, a <= b -> offs fs a <= offs fs b.
Proof.
  intros fs a b Hab. unfold offs. rewrite <- (firstn_skipn a (firstn b fs)).
  rewrite firstn_firstn, Nat.min_l by lia. rewrite concat_app, app_length. lia.
Qed.

(** The sizes of a run of axes read off the mesh. *)
Lemma map_nth_seq_mid : forall (L f R : list nat),
  map (fun x => nth x (L ++ f ++ R) 1) (seq (length L) (length f)) = f.
Proof.
  intros L f. revert L. induction f as [|y f IH]; intros L R; simpl; auto.
  rewrite app_nth2, Nat.sub_diag by lia. f_equal.
  replace (L ++ y :: f ++ R) with ((L ++ [y]) ++ f ++ R) by (rewrite <- app_assoc; reflexivity).
  replace (S (length L)) with (length (L ++ [y])) by (rewrite app_length; simpl; lia). apply IH.
Qed.

Lemma nprod_seq_skipn : forall m s, nprod m (seq s (length m - s)) = prod (skipn s m).
Proof.
  intros m s. rewrite nprod_prod, (map_ext (asize m) (fun a => nth a m 1) (asize_nth m)). f_equal.
  revert s. induction m as [|x m IH]; intros s; [destruct s; reflexivity|].
  destruct s as [|s].
  - simpl. f_equal. rewrite <- seq_shift, map_map. simpl.
    specialize (IH 0). rewrite Nat.sub_0_r in IH. exact IH.
  - simpl length. rewrite Nat.sub_succ. rewrite <- seq_shift, map_map. simpl. apply IH.
Qed.

Lemma skipn_map : forall A B (f : A -> B) l k, skipn k (map f l) = map f (skipn k l).
Proof. intros A B f l. induction l as [|x l IH]; intros [|k]; simpl; auto. Qed.

Lemma nprod_grp : forall m fs a, splits m fs -> a < length m -> nprod (rmesh fs) (grp fs a) = asize m a.
Proof.
  intros m fs a Hs Ha. rewrite (splits_asize m fs a Hs). rewrite nprod_prod, (map_ext (asize _) (fun a => nth a _ 1) (asize_nth _)). unfold grp, rmesh.
  apply splits_length in Hs. f_equal.
  assert (E : concat fs = concat (firstn a fs) ++ nth a fs [] ++ concat (skipn (S a) fs)).
  { rewrite <- (firstn_skipn a fs) at 1. rewrite (nth_skipn_cons_aux _ fs a [] ltac:(lia)).
    rewrite concat_app. reflexivity. }
  rewrite E. unfold offs. apply map_nth_seq_mid.
Qed.

Lemma nprod_flat_grp : forall m fs A, splits m fs -> (forall a, In a A -> a < length m) ->
  nprod (rmesh fs) (flat_map (grp fs) A) = nprod m A.
Proof.
  intros m fs A Hs. induction A as [|a A IH]; intros HA; [reflexivity|].
  simpl flat_map. rewrite nprod_app, IH by (intros; apply HA; simpl; auto).
  rewrite (nprod_grp m) by (auto; apply HA; simpl; auto). rewrite (nprod_cons m a A). reflexivity.
Qed.

Lemma grp_range : forall m fs a x, splits m fs -> a < length m -> In x (grp fs a) ->
  offs fs a <= x < offs fs (S a).
Proof.
  intros m fs a x Hs Ha Hx. apply splits_length in Hs. unfold grp in Hx. apply in_seq in Hx.
  rewrite offs_S by lia. lia.
Qed.

Lemma grp_lt : forall m fs a x, splits m fs -> a < length m -> In x (grp fs a) -> x < length (rmesh fs).
Proof.
  intros m fs a x Hs Ha Hx. pose proof (grp_range m fs a x Hs Ha Hx).
  rewrite (length_rmesh fs (S a)). lia.
Qed.

Lemma grp_disjoint : forall m fs a b x, splits m fs -> a < length m -> b < length m -> a <> b ->
  In x (grp fs a) -> ~ In x (grp fs b).
Proof.
  intros m fs a b x Hs Ha Hb Hab Hxa Hxb.
  pose proof (grp_range m fs a x Hs Ha Hxa). pose proof (grp_range m fs b x Hs Hb Hxb).
  destruct (Nat.lt_ge_cases a b) as [Hlt|Hge].
  - pose proof (offs_le fs (S a) b Hlt). lia.
  - pose proof (offs_le fs (S b) a ltac:(lia)). lia.
Qed.

Lemma nodup_flat_grp : forall m fs A, splits m fs -> NoDup A -> (forall a, In a A -> a < length m) ->
  NoDup (flat_map (grp fs) A).
Proof.
  intros m fs A Hs. induction A as [|a A IH]; intros Hnd HA; simpl; [constructor|].
  inversion Hnd as [|? ? HnA HndA]; subst. apply nodup_app_intro.
  - apply seq_NoDup.
  - apply IH; auto. intros; apply HA; simpl; auto.
  - intros x Hx Hy. apply in_flat_map in Hy as [b [Hb Hxb]].
    apply (grp_disjoint m fs a b x); auto; [apply HA; simpl; auto|apply HA; simpl; auto|congruence].
Qed.

(** * Devices of the refined mesh *)

Lemma wf_rmesh : forall m fs, splits m fs -> wf_mesh m -> wf_mesh (rmesh fs).
Proof.
  intros m fs Hs Hm. apply wf_meshb_spec. unfold wf_meshb, rmesh. apply forallb_forall.
  intros x Hx. apply in_concat in Hx as [f [Hf Hxf]]. apply Nat.ltb_lt.
  apply In_nth with (d := []) in Hf as [a [Ha Hna]].
  assert (Hp : 0 < prod f).
  { subst f. rewrite <- (splits_asize m fs a Hs). apply Hm. rewrite <- (splits_length m fs Hs). exact Ha. }
  clear - Hp Hxf. induction f as [|y f IH]; [inversion Hxf|]. unfold prod in Hp, IH. simpl in Hp.
  destruct Hxf as [<-|Hxf]; [nia|]. apply IH; auto. nia.
Qed.

(** The digit of axis [a] of the device of rank [r]. *)
Lemma coords_of_rank_digit : forall m a r, wf_mesh m -> a < length m -> r < ndevices m ->
  coords_of_rank m r a = (r / prod (skipn (S a) m)) mod asize m a.
Proof.
  intros m a r Hm Ha Hr. rewrite <- (mr_single m a (coords_of_rank m r)).
  assert (Hall : all_axes m = seq 0 a ++ [a] ++ seq (S a) (length m - S a)).
  { unfold all_axes. replace (length m) with (a + (1 + (length m - S a))) at 1 by lia.
    rewrite !seq_app. simpl. repeat f_equal. lia. }
  unfold coords_of_rank. rewrite Hall.
  rewrite mr_set_digits_mid, nprod_seq_skipn, nprod_single; auto.
  - rewrite <- Hall. apply seq_NoDup.
  - rewrite <- Hall. intros b Hb. apply in_seq in Hb. apply Hm. lia.
  - rewrite <- Hall, nprod_all_axes. exact Hr.
Qed.

(** A device of the refined mesh numbers its sub-axes of [a] with the
    digit the device of the same rank has on [a]. *)
Lemma refine_digit : forall m fs a r, splits m fs -> wf_mesh m -> a < length m -> r < ndevices m ->
  mr (rmesh fs) (grp fs a) (coords_of_rank (rmesh fs) r) = coords_of_rank m r a.
Proof.
  intros m fs a r Hs Hm Ha Hr. pose proof (splits_length m fs Hs) as Hl.
  assert (Hm' := wf_rmesh m fs Hs Hm).
  set (m' := rmesh fs).
  set (R := seq (offs fs (S a)) (length m' - offs fs (S a))).
  assert (Hall : all_axes m' = seq 0 (offs fs a) ++ grp fs a ++ R).
  { unfold all_axes, R, grp. rewrite (offs_S fs a) by lia.
    replace (length m') with (offs fs a + (length (nth a fs []) + (length m' - (offs fs a + length (nth a fs []))))) at 1
      by (unfold m'; rewrite (length_rmesh fs (S a)), offs_S by lia; lia).
    rewrite !seq_app. reflexivity. }
  assert (HR : nprod m' R = prod (skipn (S a) m)).
  { unfold R. rewrite nprod_seq_skipn. unfold m', rmesh. rewrite skipn_offs, prod_concat.
    rewrite <- skipn_map. unfold splits in Hs. rewrite Hs. reflexivity. }
  unfold coords_of_rank at 1. rewrite Hall, mr_set_digits_mid.
  - rewrite HR. unfold m'. rewrite (nprod_grp m) by auto. symmetry. apply coords_of_rank_digit; auto.
  - rewrite <- Hall. apply seq_NoDup.
  - rewrite <- Hall. intros b Hb. unfold all_axes in Hb. apply in_seq in Hb. apply Hm'. unfold m' in *. lia.
  - rewrite <- Hall, nprod_all_axes. unfold m'. rewrite (ndevices_rmesh m); auto.
Qed.

(** * Types over the refined mesh *)

Lemma refine_mr : forall m fs A r, splits m fs -> wf_mesh m -> r < ndevices m ->
  (forall a, In a A -> a < length m) ->
  mr (rmesh fs) (flat_map (grp fs) A) (coords_of_rank (rmesh fs) r) = mr m A (coords_of_rank m r).
Proof.
  intros m fs A r Hs Hm Hr. induction A as [|a A IH]; intros HA; [reflexivity|].
  simpl flat_map. rewrite mr_app, mr_cons, IH by (intros; apply HA; simpl; auto).
  rewrite (nprod_flat_grp m) by (auto; intros; apply HA; simpl; auto).
  rewrite (refine_digit m) by (auto; apply HA; simpl; auto). reflexivity.
Qed.

Lemma refine_lsize : forall m fs D, splits m fs -> (forall a, In a (axes D) -> a < length m) ->
  lsize (rmesh fs) (rdim fs D) = lsize m D.
Proof. intros m fs D Hs HA. unfold lsize, rdim. simpl. now rewrite (nprod_flat_grp m). Qed.

Lemma refine_gidx : forall m fs D r k, splits m fs -> wf_mesh m -> r < ndevices m ->
  (forall a, In a (axes D) -> a < length m) ->
  gidx (rmesh fs) (rdim fs D) (coords_of_rank (rmesh fs) r) k = gidx m D (coords_of_rank m r) k.
Proof.
  intros m fs D r k Hs Hm Hr HA. unfold gidx, block. rewrite (refine_lsize m) by auto.
  simpl axes. rewrite (refine_mr m); auto.
Qed.

Lemma wf_axes_range : forall m t D, wf m t -> In D t -> forall a, In a (axes D) -> a < length m.
Proof.
  intros m t D [_ [HF _]] HD. rewrite Forall_forall in HF. apply HF, HD.
Qed.

Lemma refine_sizes : forall m fs t, splits m fs -> wf m t ->
  map (lsize (rmesh fs)) (rtype fs t) = map (lsize m) t.
Proof.
  intros m fs t Hs Ht. unfold rtype. rewrite map_map. apply map_ext_in. intros D HD.
  apply (refine_lsize m); auto. eapply wf_axes_range; eauto.
Qed.

Theorem refine_size : forall m fs t, splits m fs -> wf m t -> size (rmesh fs) (rtype fs t) = size m t.
Proof. intros. rewrite !size_prod. f_equal. apply (refine_sizes m); auto. Qed.

Lemma refine_gsizes : forall fs t, map gsize (rtype fs t) = map gsize t.
Proof. intros. unfold rtype. rewrite map_map. reflexivity. Qed.

Lemma used_rtype : forall fs t, used (rtype fs t) = flat_map (grp fs) (used t).
Proof.
  intros fs t. unfold used, rtype. induction t as [|D t IH]; simpl; auto.
  rewrite IH, flat_map_app. reflexivity.
Qed.

Theorem refine_wf : forall m fs t, splits m fs -> wf m t -> wf (rmesh fs) (rtype fs t).
Proof.
  intros m fs t Hs Ht. pose proof Ht as [Hm [HF Hnd]]. split; [apply (wf_rmesh m fs); auto|split].
  - apply Forall_forall. intros D' HD'. unfold rtype in HD'. apply in_map_iff in HD' as [D [<- HD]].
    rewrite Forall_forall in HF. destruct (HF D HD) as [Hg [HA Hdv]].
    unfold wf_dim, rdim; simpl. repeat split; auto.
    + intros x Hx. apply in_flat_map in Hx as [a [Ha Hxa]]. apply (grp_lt m fs a); auto.
    + rewrite (nprod_flat_grp m); auto.
  - rewrite used_rtype. apply (nodup_flat_grp m); auto. intros a Ha. apply (wf_used_lt m t); auto.
Qed.

(** Every device holds the same elements before and after refinement: the
    device of rank [r] on the refined mesh has, at every local index, the
    element the device of rank [r] has on [m]. *)
Theorem refine_gindex : forall m fs t r i, splits m fs -> wf m t -> r < ndevices m ->
  gindex (rmesh fs) (rtype fs t) (coords_of_rank (rmesh fs) r) i = gindex m t (coords_of_rank m r) i.
Proof.
  intros m fs t r i Hs Ht Hr. unfold gindex, rtype. revert i.
  assert (HA : forall D, In D t -> forall a, In a (axes D) -> a < length m) by (intros; eapply wf_axes_range; eauto).
  assert (Hm : wf_mesh m) by apply Ht. clear Ht. induction t as [|D t IH]; intros [|k i]; simpl; auto.
  rewrite (refine_gidx m) by (auto; apply (HA D); simpl; auto). f_equal.
  apply IH. intros D' HD'; apply HA; simpl; auto.
Qed.

Corollary refine_local : forall V (A : list nat -> V) m fs t r i, splits m fs -> wf m t -> r < ndevices m ->
  local A (rmesh fs) (rtype fs t) (coords_of_rank (rmesh fs) r) i = local A m t (coords_of_rank m r) i.
Proof. intros. unfold local. rewrite (refine_gindex m); auto. Qed.

Lemma refine_blocks_start : forall m fs t r, splits m fs -> wf m t -> r < ndevices m ->
  map (fun D => gidx (rmesh fs) D (coords_of_rank (rmesh fs) r) 0) (rtype fs t)
  = map (fun D => gidx m D (coords_of_rank m r) 0) t.
Proof.
  intros m fs t r Hs Ht Hr. unfold rtype. rewrite map_map. apply map_ext_in. intros D HD.
  apply (refine_gidx m); auto; [apply Ht|]. eapply wf_axes_range; eauto.
Qed.
