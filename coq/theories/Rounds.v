(** The staged form of a cross-mesh schedule: what a target receives from
    other ranks, cut and packed into rounds so that a round's buffers stay
    within a budget.

    Each piece a target receives from another rank is cut along its first
    dimension longer than one index into runs of at most [per] indices, [per]
    the most whole slices of that dimension that fit the budget (at least
    one); the cuts of every target are then packed in order into rounds in
    which every rank sends at most [budget] elements and receives at most
    [budget] elements, except that a rank may exceed it in a round where it
    moves a single cut (a slice thicker than the budget): first fit, each
    cut into the first round where its sender and its receiver stay within
    the budget, else a new round, found from the first rounds where each of
    them still has room ([pack]).

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

(** Rounds as they are packed: a round's cuts (last first) and what each
    rank sends and receives in it, in tables, so that a fit is two lookups
    instead of two sums over the round. *)
Definition rstate := (list cut * NatMap.t nat * NatMap.t nat)%type.

Definition empty_round : rstate := ([], NatMap.empty nat, NatMap.empty nat).

Definition fits_in (budget : nat) (c : cut) (st : rstate) : bool :=
  let '(_, sends, recvs) := st in
  (find_or 0 (csrc c) sends + vol (cbox c) <=? budget) && (find_or 0 (cdst c) recvs + vol (cbox c) <=? budget).

Definition add_in (c : cut) (st : rstate) : rstate :=
  let '(rv, sends, recvs) := st in
  (c :: rv, NatMap.add (csrc c) (find_or 0 (csrc c) sends + vol (cbox c)) sends,
   NatMap.add (cdst c) (find_or 0 (cdst c) recvs + vol (cbox c)) recvs).

(** The packing: rounds [0..n-1] in a table, and per rank the first round
    in which its load is below the budget (as sender, as receiver): no cut
    that moves something fits in a round before it. *)
Definition pstate := (NatMap.t rstate * nat * (NatMap.t nat * NatMap.t nat))%type.

(** The first round from [i] (below [n]) that [c] fits, else [n] ([k]: fuel, [n] is enough). *)
Fixpoint scan (budget : nat) (c : cut) (rs : NatMap.t rstate) (n i k : nat) : nat :=
  match k with
  | 0 => n
  | S k' => if i <? n then if fits_in budget c (find_or empty_round i rs) then i else scan budget c rs n (S i) k'
            else n
  end.

(** [c] into round [i] when [i] is a round and [c] fits it, else into a new
    round at the end. Whatever [i] is, every round stays within the budget
    or holds one cut ([Roundsproof.pack_bounded]). *)
Definition put (budget : nat) (c : cut) (i : nat) (rs : NatMap.t rstate) (n : nat) : nat * NatMap.t rstate * nat :=
  let cur := find_or empty_round i rs in
  if (i <? n) && fits_in budget c cur then (i, NatMap.add i (add_in c cur) rs, n)
  else (n, NatMap.add n (add_in c empty_round) rs, S n).

Definition sends_of (st : rstate) : NatMap.t nat := snd (fst st).
Definition recvs_of (st : rstate) : NatMap.t nat := snd st.

(** Rank [r]'s start moved past the rounds from [p] where its load
    ([loads]: sent or received) has reached the budget ([k]: fuel). *)
Fixpoint advance (budget : nat) (loads : rstate -> NatMap.t nat) (r : nat) (rs : NatMap.t rstate) (n p k : nat) : nat :=
  match k with
  | 0 => p
  | S k' => if (p <? n) && (budget <=? find_or 0 r (loads (find_or empty_round p rs)))
            then advance budget loads r rs n (S p) k' else p
  end.

(** One cut: into the first round it fits from the later of its sender's
    and its receiver's starts (first fit for every cut that moves
    something: no earlier round has room), else a new round; then the two
    starts move on. A start only moves forward, and past a round where its
    rank moves a cut, so the starts cost at most two steps per cut: one
    sender to [n] targets at a budget of one cut packs in linear time, where
    trying every round from the first took [n^2 / 2] fits. *)
Definition pack_step (budget : nat) (st : pstate) (c : cut) : pstate :=
  let '(rs, n, (ss, rr)) := st in
  let i := scan budget c rs n (Nat.max (find_or 0 (csrc c) ss) (find_or 0 (cdst c) rr)) n in
  let '(_, rs', n') := put budget c i rs n in
  (rs', n', (NatMap.add (csrc c) (advance budget sends_of (csrc c) rs' n' (find_or 0 (csrc c) ss) n') ss,
             NatMap.add (cdst c) (advance budget recvs_of (cdst c) rs' n' (find_or 0 (cdst c) rr) n') rr)).

(** The rounds of [cs], each in the order its cuts were packed. *)
Definition pack (budget : nat) (cs : list cut) : list (list cut) :=
  let '(rs, n, _) := fold_left (pack_step budget) cs (NatMap.empty rstate, 0, (NatMap.empty nat, NatMap.empty nat)) in
  map (fun i => rev' (fst (fst (find_or empty_round i rs)))) (seq 0 n).

(** The rounds of a cross-mesh schedule (what [verishard.runtime.crossmesh_mpi] runs). *)
Definition xrounds (budget : nat) (tr : list nat) (pss : list (list piece)) : list (list cut) :=
  pack budget (xcuts budget tr pss).
