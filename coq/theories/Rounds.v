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

(** The cuts of every target of a schedule ([tr]: the targets' ranks):
    [tcuts budget j (nth j tr 0) (nth j pss [])] for each [j] in turn
    ([Roundsproof.xcuts_nth]), read along both lists. *)
Fixpoint xcuts_from (budget j : nat) (tr : list nat) (pss : list (list piece)) : list cut :=
  match pss with
  | [] => []
  | ps :: pss' => tcuts budget j (hd 0 tr) ps ++ xcuts_from budget (S j) (tl tr) pss'
  end.

Definition xcuts (budget : nat) (tr : list nat) (pss : list (list piece)) : list cut := xcuts_from budget 0 tr pss.

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

(** [place] over rounds as they are packed: a round's cuts (last first)
    and what each rank sends and receives in it, in tables, so that a fit
    is two lookups instead of two sums over the round (quadratic in the
    cuts of a round). *)
Definition rstate := (list cut * NatMap.t nat * NatMap.t nat)%type.

Definition fits_in (budget : nat) (c : cut) (st : rstate) : bool :=
  let '(_, sends, recvs) := st in
  (find_or 0 (csrc c) sends + vol (cbox c) <=? budget) && (find_or 0 (cdst c) recvs + vol (cbox c) <=? budget).

Definition add_in (c : cut) (st : rstate) : rstate :=
  let '(rv, sends, recvs) := st in
  (c :: rv, NatMap.add (csrc c) (find_or 0 (csrc c) sends + vol (cbox c)) sends,
   NatMap.add (cdst c) (find_or 0 (cdst c) recvs + vol (cbox c)) recvs).

Fixpoint place_in (budget : nat) (c : cut) (rs : list rstate) : list rstate :=
  match rs with
  | [] => [add_in c ([], NatMap.empty nat, NatMap.empty nat)]
  | st :: rs' => if fits_in budget c st then add_in c st :: rs' else st :: place_in budget c rs'
  end.

(** First fit of [cs] in turn ([Roundsproof.pack_place]: [fold_left] of [place]). *)
Definition pack (budget : nat) (cs : list cut) : list (list cut) :=
  map (fun st => rev' (fst (fst st))) (fold_left (fun rs c => place_in budget c rs) cs []).

(** The rounds of a cross-mesh schedule (what [verishard.runtime.crossmesh_mpi] runs). *)
Definition xrounds (budget : nat) (tr : list nat) (pss : list (list piece)) : list (list cut) :=
  pack budget (xcuts budget tr pss).
