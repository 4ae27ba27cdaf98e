(** Distributed array types: dimension types [l{a1..am}g], well-formedness,
    local sizes and blocks. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh.
Import ListNotations.

(** A dimension: the mesh axes sharding it (major to minor) and its global size. *)
Record dim := mkdim { axes : list nat; gsize : nat }.

Definition atype := list dim.

(** Local size of a dimension: [g / prod n(a)]. *)
Definition lsize (m : mesh) (D : dim) : nat := gsize D / nprod m (axes D).

(** Elements per device: the product of the local sizes (by recursion on
    the dimensions; [size_prod] states it as that product). *)
Fixpoint size (m : mesh) (t : atype) : nat :=
  match t with
  | [] => 1
  | D :: t' => lsize m D * size m t'
  end.

(* Proofs go through [size_prod]. *)
Arguments size : simpl never.

Lemma size_prod : forall m t, size m t = prod (map (lsize m) t).
Proof.
  intros m t. induction t as [|D t IH]; [reflexivity|].
  change (lsize m D * size m t = prod (map (lsize m) (D :: t))). rewrite IH. reflexivity.
Qed.

(** Axes used anywhere in the type; the others are replicated. *)
Definition used (t : atype) : list nat := flat_map axes t.

Definition wf_dim (m : mesh) (D : dim) : Prop :=
  0 < gsize D /\ (forall a, In a (axes D) -> a < length m) /\ Nat.divide (nprod m (axes D)) (gsize D).

Definition wf (m : mesh) (t : atype) : Prop :=
  wf_mesh m /\ Forall (wf_dim m) t /\ NoDup (used t).

Definition wf_dimb (m : mesh) (D : dim) : bool :=
  let n := length m in
  (0 <? gsize D) && forallb (fun a => a <? n) (axes D)
  && (gsize D mod nprod m (axes D) =? 0).

Definition wfb (m : mesh) (t : atype) : bool :=
  wf_meshb m && forallb (wf_dimb m) t && nodupb (used t).

Lemma wf_dimb_spec : forall m D, wf_mesh m -> (wf_dimb m D = true <-> wf_dim m D).
Proof.
  intros m D Hm. unfold wf_dimb, wf_dim. cbv zeta. rewrite !andb_true_iff, Nat.ltb_lt, forallb_forall, Nat.eqb_eq.
  split.
  - intros [[Hg Ha] Hd]. assert (Ha' : forall a, In a (axes D) -> a < length m)
      by (intros; apply Nat.ltb_lt, Ha; auto).
    repeat split; auto. apply Nat.mod_divide; auto.
    pose proof (nprod_pos m (axes D) Hm Ha'). lia.
  - intros [Hg [Ha Hd]]. repeat split; auto.
    + intros; apply Nat.ltb_lt, Ha; auto.
    + apply Nat.mod_divide; auto. pose proof (nprod_pos m (axes D) Hm Ha). lia.
Qed.

Lemma wfb_spec : forall m t, wfb m t = true <-> wf m t.
Proof.
  intros m t. unfold wfb, wf. split.
  - intros H. apply andb_true_iff in H as [H Hn]. apply andb_true_iff in H as [Hm Hd].
    apply wf_meshb_spec in Hm. apply nodupb_spec in Hn. rewrite forallb_forall in Hd.
    repeat split; auto. apply Forall_forall. intros D HD. apply wf_dimb_spec; auto.
  - intros [Hm [Hd Hn]]. rewrite Forall_forall in Hd.
    apply andb_true_iff; split; [apply andb_true_iff; split|].
    + apply wf_meshb_spec; auto.
    + apply forallb_forall; intros; apply wf_dimb_spec; auto.
    + apply nodupb_spec; auto.
Qed.

(** Block index of device [c] in dimension [D]: mixed radix over its axes. *)
Definition block (m : mesh) (D : dim) (c : coords) : nat := mr m (axes D) c.

(** Blocks of a device in every dimension: what it holds. *)
Definition blocks (m : mesh) (t : atype) (c : coords) : list nat := map (fun D => block m D c) t.

(** Global index held at local index [k] of dimension [D] on device [c]. *)
Definition gidx (m : mesh) (D : dim) (c : coords) (k : nat) : nat := block m D c * lsize m D + k.

Lemma lsize_mul : forall m D, wf_mesh m -> wf_dim m D -> lsize m D * nprod m (axes D) = gsize D.
Proof.
  intros m D Hm [Hg [Ha [z Hz]]]. unfold lsize. rewrite Hz, Nat.div_mul; auto.
  pose proof (nprod_pos m (axes D) Hm Ha). lia.
Qed.

Lemma lsize_pos : forall m D, wf_mesh m -> wf_dim m D -> 0 < lsize m D.
Proof.
  intros m D Hm HD. pose proof (lsize_mul m D Hm HD). destruct HD. 
  destruct (lsize m D); simpl in *; lia.
Qed.

(** Local size after a gather removes the minor axes [xs], resp. after
    appending [xs] to a dimension whose local size [xs] divides. *)
Lemma lsize_prefix : forall m P xs g, wf_mesh m -> wf_dim m (mkdim (P ++ xs) g) ->
  lsize m (mkdim P g) = lsize m (mkdim (P ++ xs) g) * nprod m xs.
Proof.
  intros m P xs g Hm HD.
  assert (Hl := lsize_mul m _ Hm HD). simpl in Hl. rewrite nprod_app in Hl.
  destruct HD as [_ [Hax _]]. simpl in Hax.
  assert (HP : 0 < nprod m P) by (apply nprod_pos; auto; intros; apply Hax, in_or_app; auto).
  set (L := lsize m {| axes := P ++ xs; gsize := g |}) in *.
  unfold lsize at 1. simpl. rewrite <- Hl.
  replace (L * (nprod m P * nprod m xs)) with (L * nprod m xs * nprod m P) by ring.
  apply Nat.div_mul. lia.
Qed.

Lemma lsize_extend : forall m D xs z, wf_mesh m -> wf_dim m D -> lsize m D = z * nprod m xs ->
  lsize m (mkdim (axes D ++ xs) (gsize D)) = z.
Proof.
  intros m D xs z Hm HD Hz.
  assert (E := lsize_mul m D Hm HD). assert (Hp := lsize_pos m D Hm HD).
  assert (HnA : 0 < nprod m (axes D)) by (apply nprod_pos; auto; apply HD).
  assert (Hnx : 0 < nprod m xs).
  { destruct (Nat.eq_dec (nprod m xs) 0) as [E0|E0]; [rewrite E0 in Hz; lia|lia]. }
  unfold lsize at 1. simpl. rewrite nprod_app, <- E, Hz.
  replace (z * nprod m xs * nprod m (axes D)) with (z * (nprod m (axes D) * nprod m xs)) by ring.
  apply Nat.div_mul. lia.
Qed.

(** Block stays within the dimension: [gidx] ranges over [0, g). *)
Lemma gidx_lt : forall m D c k, wf_mesh m -> wf_dim m D -> valid m c ->
  k < lsize m D -> gidx m D c k < gsize D.
Proof.
  intros m D c k Hm HD Hc Hk. unfold gidx, block.
  assert (mr m (axes D) c < nprod m (axes D)).
  { apply mr_lt. intros a Ha. apply Hc. destruct HD as [_ [HA _]]. auto. }
  rewrite <- (lsize_mul m D Hm HD). nia.
Qed.

(** Membership of a dimension in a well-formed type gives a well-formed dimension. *)
Lemma wf_nth : forall m t d D, wf m t -> nth_error t d = Some D -> wf_dim m D.
Proof.
  intros m t d D [_ [HF _]] HD. rewrite Forall_forall in HF. apply HF.
  eapply nth_error_In; eauto.
Qed.

(** Every used axis is an axis of the mesh. *)
Lemma wf_used_lt : forall m t a, wf m t -> In a (used t) -> a < length m.
Proof.
  intros m t a [_ [HF _]] Ha. unfold used in Ha. apply in_flat_map in Ha.
  destruct Ha as [D [HD Ha]]. rewrite Forall_forall in HF. apply (HF D HD); auto.
Qed.

(** Axes of a dimension are among the used axes. *)
Lemma in_used : forall t d D a, nth_error t d = Some D -> In a (axes D) -> In a (used t).
Proof.
  intros. unfold used. apply in_flat_map. exists D. split; auto. eapply nth_error_In; eauto.
Qed.

(** For every rank in order, the global offset where its block starts in
    every dimension: what the runtime uses to lay out data. *)
Definition block_starts (m : mesh) (t : atype) : list nat :=
  flat_map (fun r => map (fun D => gidx m D (coords_of_rank m r) 0) t) (seq 0 (ndevices m)).

(** [used] over list structure. *)
Lemma used_app : forall t1 t2, used (t1 ++ t2) = used t1 ++ used t2.
Proof. intros. unfold used. apply flat_map_app. Qed.

Lemma used_cons : forall D t, used (D :: t) = axes D ++ used t.
Proof. reflexivity. Qed.

(** Appending axes whose group divides the local size keeps the dimension divisible. *)
Lemma nprod_app_divide : forall m D xs, wf_mesh m -> wf_dim m D ->
  Nat.divide (nprod m xs) (lsize m D) -> Nat.divide (nprod m (axes D ++ xs)) (gsize D).
Proof.
  intros m D xs Hm HD Hdiv. rewrite nprod_app, <- (lsize_mul m D Hm HD).
  rewrite (Nat.mul_comm (lsize m D)). apply Nat.mul_divide_mono_l. exact Hdiv.
Qed.
