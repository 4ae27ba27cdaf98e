(** The staged form of a cross-mesh schedule: what a target receives from
    other ranks, cut and packed into rounds so that a round's buffers stay
    within a budget.

    Each piece a target receives from another rank is cut along its first
    dimension longer than one index into runs of at most [per] indices, [per]
    the most whole slices of that dimension that fit the budget (at least
    one); the cuts of every target are then packed first fit, in order, into
    rounds in which every rank sends at most [budget] elements and receives
    at most [budget] elements, except that a rank may exceed it in a round
    where it moves a single cut (a slice thicker than the budget).

    Definitions and the executable builder only; proofs in [Roundsproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Crossmesh.
Import ListNotations.

(** Runs of at most [per] indices covering [[s, s + l)], in order ([fuel]
    bounds the recursion; [l] is enough when [per > 0]). *)
Fixpoint runs (per s l fuel : nat) : list interval :=
  match fuel with
  | 0 => []
  | S f => if l =? 0 then [] else (s, Nat.min per l) :: runs per (s + per) (l - per) f
  end.

(** The first dimension of [B] (from index [i]) longer than one index, else [0]. *)
Fixpoint first_long (B : box) (i : nat) : nat :=
  match B with
  | [] => 0
  | iv :: B' => if 1 <? snd iv then i else first_long B' (S i)
  end.

(** A box cut along [first_long] into runs of at most [per] indices, [per]
    the number of its slices along that dimension that fit in [budget]
    elements (at least one). A box of no dimension is one cut. *)
Definition cut_along (budget : nat) (B : box) : list box :=
  let d := first_long B 0 in
  let iv := nth d B (0, 0) in
  let slice := vol B / Nat.max 1 (snd iv) in
  let per := Nat.max 1 (budget / Nat.max 1 slice) in
  map (fun r => set_nth B d r) (runs per (fst iv) (snd iv) (snd iv)).

Definition cut_box (budget : nat) (B : box) : list box :=
  match B with
  | [] => [B]
  | _ => cut_along budget B
  end.

(** A transfer: sending rank, receiving rank, target index, global box. *)
Record cut := mkcut { csrc : nat; cdst : nat; ctgt : nat; cbox : box }.

(** The cuts of target [j] (rank [self]): every piece from another rank, cut. *)
Definition tcuts (budget j self : nat) (ps : list piece) : list cut :=
  flat_map (fun q => if psrc q =? self then []
                     else map (fun C => mkcut (psrc q) self j C) (cut_box budget (pbox q))) ps.

(** The cuts of every target of a schedule ([tr]: the targets' ranks). *)
Definition xcuts (budget : nat) (tr : list nat) (pss : list (list piece)) : list cut :=
  flat_map (fun j => tcuts budget j (nth j tr 0) (nth j pss [])) (seq 0 (length pss)).

(** Elements rank [r] sends ([who = csrc]) or receives ([who = cdst]) in a round. *)
Definition load (who : cut -> nat) (r : nat) (rd : list cut) : nat :=
  lsum (fun c => if who c =? r then vol (cbox c) else 0) rd.

Definition fits (budget : nat) (c : cut) (rd : list cut) : bool :=
  (load csrc (csrc c) rd + vol (cbox c) <=? budget) && (load cdst (cdst c) rd + vol (cbox c) <=? budget).

(** First fit: into the first round where its sender and its receiver stay
    within the budget, else a new round. *)
Fixpoint place (budget : nat) (c : cut) (rs : list (list cut)) : list (list cut) :=
  match rs with
  | [] => [[c]]
  | rd :: rs' => if fits budget c rd then (rd ++ [c]) :: rs' else rd :: place budget c rs'
  end.

Definition pack (budget : nat) (cs : list cut) : list (list cut) :=
  fold_left (fun rs c => place budget c rs) cs [].

(** The rounds of a cross-mesh schedule (what [verishard.runtime.crossmesh_mpi] runs). *)
Definition xrounds (budget : nat) (tr : list nat) (pss : list (list piece)) : list (list cut) :=
  pack budget (xcuts budget tr pss).
