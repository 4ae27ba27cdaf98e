(** The synthesizer (placeholder: the naive gather-everything-then-slice plan). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker.
Import ListNotations.

(** Gather every axis of every dimension, then slice the target's axes. *)
Definition naive (m : mesh) (src dst : atype) : plan :=
  flat_map (fun dD => match axes (snd dD) with [] => [] | xs => [AllGather (fst dD) xs] end)
           (combine (seq 0 (length src)) src) ++
  flat_map (fun dD => match axes (snd dD) with [] => [] | xs => [DynSlice (fst dD) xs] end)
           (combine (seq 0 (length dst)) dst).

(** The plan and whether the memory bound is guaranteed for it. *)
Definition synthesize (m : mesh) (src dst : atype) : bool * plan := (false, naive m src dst).
