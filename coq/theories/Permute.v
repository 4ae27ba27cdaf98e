(** The device bijection of an [AllPermute]: which device sends its local
    array to which. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types Rules.
Import ListNotations.

(** Axes a type leaves replicated, in mesh order. *)
Definition replicated (m : mesh) (t : atype) : list nat :=
  filter (fun a => negb (memb a (used t))) (all_axes m).

(** Every axis once: the used ones in type order, then the replicated ones.
    The mixed-radix number over this layout numbers devices by the blocks
    they hold (most significant dimension first), then by replica. *)
Definition layout (m : mesh) (t : atype) : list nat := used t ++ replicated m t.

(** The device that holds, under [t], what device [c] must hold under [t']. *)
Definition perm_src (m : mesh) (t t' : atype) (c : coords) : coords :=
  set_digits m (layout m t) (fun _ => 0) (mr m (layout m t') c).

(** [p_c] for every rank [c]: rank [p_c] sends its local array to rank [c]. *)
Definition permute_table (m : mesh) (t t' : atype) : list nat :=
  map (fun r => rank m (perm_src m t t' (coords_of_rank m r))) (seq 0 (ndevices m)).

Definition same_local_shape (m : mesh) (t t' : atype) : Prop :=
  map gsize t' = map gsize t /\ map (lsize m) t' = map (lsize m) t.

Theorem perm_src_valid : forall m t t' c,
  wf m t -> wf m t' -> same_local_shape m t t' -> valid m c -> valid m (perm_src m t t' c).
Proof.
Admitted.

(** The source device holds under [t] exactly the blocks [c] needs under [t']. *)
Theorem perm_src_blocks : forall m t t' c,
  wf m t -> wf m t' -> same_local_shape m t t' -> valid m c ->
  blocks m t (perm_src m t t' c) = blocks m t' c.
Proof.
Admitted.

(** The table is a permutation of the ranks. *)
Theorem permute_table_perm : forall m t t',
  wf m t -> wf m t' -> same_local_shape m t t' ->
  Permutation (permute_table m t t') (seq 0 (ndevices m)).
Proof.
Admitted.

(** As many fixed points as possible: every device whose block does not
    change keeps its data (no bijection can fix any other device). *)
Theorem perm_src_fixed : forall m t t' c,
  wf m t -> wf m t' -> same_local_shape m t t' -> valid m c ->
  blocks m t c = blocks m t' c -> forall a, a < length m -> perm_src m t t' c a = c a.
Proof.
Admitted.
