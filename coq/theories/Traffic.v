(** Traffic: what a device must receive, whatever the plan. The proofs that
    every accepted plan receives at least this are in [Trafficproof.v]. *)
From Coq Require Import List Arith Lia.
From VS Require Import Prelude Mesh Types.
Import ListNotations.

(** Length of the intersection of the intervals [s, s + l) and [s', s' + l']
    (natural subtraction makes disjoint intervals meet in 0). *)
Definition overlap (s l s' l' : nat) : nat := Nat.min (s + l) (s' + l') - Nat.max s s'.

(** Elements device [c] holds under both [src] and [dst]: in every dimension
    its two blocks are intervals of global indices, and the elements it
    keeps are their product. *)
Definition kept (m : mesh) (src dst : atype) (c : coords) : nat :=
  prod (map (fun DE => overlap (gidx m (fst DE) c 0) (lsize m (fst DE))
                               (gidx m (snd DE) c 0) (lsize m (snd DE)))
            (combine src dst)).

(** Elements of its target block that device [c] does not hold in the source. *)
Definition need (m : mesh) (src dst : atype) (c : coords) : nat := size m dst - kept m src dst c.

(** The transfer lower bound: the most any device needs. *)
Definition lower_bound (m : mesh) (src dst : atype) : nat :=
  fold_right Nat.max 0 (map (fun r => need m src dst (coords_of_rank m r)) (seq 0 (ndevices m))).

(** Elements a plan's report says the worst device receives, over all steps. *)
Definition traffic (received : list nat) : nat := fold_right plus 0 received.
