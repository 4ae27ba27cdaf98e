(** Chunked execution of one step: the [k] pieces of a step and where each
    one writes (definitions; proofs in [Chunkproof.v]).

    A step takes type [t] to [t'] and runs in [k] pieces cut along a local
    dimension [ch] (the runtime uses [ch = 0]). Its chunk range [R] is the
    smaller of the two local sizes of [ch]; both are multiples of [R]
    ([Chunkproof.chunk_range_divides]). The chunk coordinate of a local index
    is its [ch] component modulo [R], and piece [p] of [k] (with [k]
    dividing [R]) is the set of indices whose chunk coordinate lies in
    [[p * (R / k), (p + 1) * (R / k))] ([Chunkproof.piece_interval]): in
    the input and in the output alike. Piece [p] of the schedule writes the
    output positions of piece [p], each with the element [Semantics.source]
    names; [Chunkproof.chunk_decompose] proves every output position is
    written by exactly one piece, reading an input position of that same
    piece, so the pieces can run one after the other on their own rows. *)
From Coq Require Import List Arith Lia.
From VS Require Import Prelude Mesh Types Rules Permute Semantics.
Import ListNotations.

(** The chunk range of step [t -> t'] along local dimension [ch]. *)
Definition chunk_range (m : mesh) (t t' : atype) (ch : nat) : nat :=
  Nat.min (lsize m (nth ch t dflt)) (lsize m (nth ch t' dflt)).

(** The chunk coordinate of local index [i]. *)
Definition ccoord (R ch : nat) (i : list nat) : nat := nth ch i 0 mod R.

(** The piece, of [k] equal pieces of [[0, R)], holding chunk coordinate [r]. *)
Definition piece (R k r : nat) : nat := r / (R / k).

(** The piece that holds local index [i] of the step's input or output. *)
Definition piece_of (m : mesh) (t t' : atype) (ch k : nat) (i : list nat) : nat :=
  let R := chunk_range m t t' ch in piece R k (ccoord R ch i).

(** The chunked schedule: what piece [p] writes at output position [i] of
    device [c] (the device and input index it reads), or nothing. *)
Definition chunk_source (m : mesh) (t : atype) (op : coll) (t' : atype) (ch k p : nat)
    (c : coords) (i : list nat) : option (coords * list nat) :=
  if Nat.eqb (piece_of m t t' ch k i) p then Some (source m t op t' c i) else None.

(** Memory while piece [p] runs, per device, in elements: the input pieces
    [p .. k-1] not yet released ([a] each) and the output pieces [0 .. p]
    written so far ([b] each). *)
Definition held (k a b p : nat) : nat := (k - p) * a + S p * b.
