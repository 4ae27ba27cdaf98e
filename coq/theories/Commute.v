(** Functions applied along a dimension: the computation a structured layer
    does between two redistributions (a block-diagonal factor of a Monarch
    matrix, a butterfly factor on local bits). [f] gets the whole row of the
    array along dimension [d] (the [g] elements that differ from index [i] in
    position [d] only), the output position along [d], and the global index
    [i] itself, so that it may depend on the other coordinates (which block of
    a block-diagonal matrix applies). Commuteproof.v proves that when no mesh
    axis shards [d], every device applying [f] to its local rows computes its
    block of the result. *)
From Coq Require Import List Arith.
From VS Require Import Prelude Mesh Types Semantics.
Import ListNotations.

(** The row of [A] along [d] through index [i], of length [g]. *)
Definition fiber {V} (A : list nat -> V) (i : list nat) (d g : nat) : list V :=
  map (fun k => A (set_nth i d k)) (seq 0 g).

(** [f] applied along dimension [d] (of global size [g] in the input) of the
    global array [A]. *)
Definition along {V W} (f : list nat -> list V -> nat -> W) (d g : nat) (A : list nat -> V)
  : list nat -> W :=
  fun i => f i (fiber A i d g) (nth d i 0).

(** What device [c] computes from its local array [B] of type [t], for its
    local array of type [t']: the same [f] on its local rows (of its local
    size along [d]), told the global index ([gindex] under [t']) of each
    output element. *)
Definition along_local {V W} (f : list nat -> list V -> nat -> W) (d : nat) (m : mesh) (t t' : atype)
  (c : coords) (B : list nat -> V) : list nat -> W :=
  fun i => f (gindex m t' c i) (fiber B i d (lsize m (nth d t dflt))) (nth d i 0).

(** The input type [t] and output type [t'] of such a step: the same
    dimensions except [d], whose global size may change, and no axis shards
    [d] in either. *)
Definition along_ok (t t' : atype) (d : nat) : Prop :=
  length t' = length t /\ d < length t /\ axes (nth d t dflt) = [] /\ axes (nth d t' dflt) = [] /\
  (forall j, j <> d -> nth j t' dflt = nth j t dflt).
