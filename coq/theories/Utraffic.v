(** Traffic over uneven types: what a device must receive, whatever the
    plan the uneven checker ([Uchecker.v]) accepts. The counterpart of
    [Traffic.v]; the proofs are in [Utrafficproof.v]
    ([ucheck_traffic_lower_bound], and [ulower_bound_even]: on even types
    this is [Traffic.lower_bound]). Only valid elements count: padding is
    never needed, and an element held only as padding is not held. *)
From Coq Require Import List Arith Lia.
From VS Require Import Prelude Mesh Types Traffic Uneven.
Import ListNotations.

(** Valid elements device [c] holds under both [src] and [dst]: in every
    dimension the valid parts of its two blocks are intervals of global
    indices (starting at [ugidx _ _ c 0], of length [uvlen]), and the
    elements it keeps are their product. *)
Definition ukept (m : mesh) (src dst : atype) (c : coords) : nat :=
  prod (map (fun DE => overlap (ugidx m (fst DE) c 0) (uvlen m (fst DE) c)
                               (ugidx m (snd DE) c 0) (uvlen m (snd DE) c))
            (combine src dst)).

(** Valid elements of device [c]'s target block (its chunked buffer,
    [prod] of the [uvlen]) that it does not hold in the source. *)
Definition uneed (m : mesh) (src dst : atype) (c : coords) : nat :=
  usize Chunked m dst c - ukept m src dst c.

(** The transfer lower bound over uneven types: the most any device needs. *)
Definition ulower_bound (m : mesh) (src dst : atype) : nat :=
  fold_right Nat.max 0 (map (fun r => uneed m src dst (coords_of_rank m r)) (seq 0 (ndevices m))).
