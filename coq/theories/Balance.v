(** Senders balanced over replicas: where a source block (cell) is held by
    several ranks (data-parallel replicas, Replicate placements), the pieces
    of it that go to ranks not holding it are dealt to its holders in turn,
    so that each holder sends at most its share rounded up to one piece
    ([Balanceproof.xplan_bal_balanced]).

    [xplan]'s own choice ([Crossmesh.pick_from]: the target itself when it
    holds the cell, else holder [j mod |holders|] for target index [j])
    lines up with a tensor-parallel stride: a cell read by targets
    [t, t + 8, t + 16, ...] is sent by few of its holders. Here the [k]-th
    moved piece of a cell, in target order, is sent by its holder
    [(start + k) mod |holders|]; a piece whose target holds its cell keeps
    [xplan]'s sender (the target itself). [start] rotates the deal, so that
    the tensors of one transfer give their extra pieces to different
    holders; every bound holds for every [start].

    Definitions and the executable builder only; proofs in [Balanceproof.v]. *)
From Coq Require Import List Arith Bool.
From VS Require Import Prelude Mesh Types Uneven Crossmesh.
Import ListNotations.

(** Holder number [(start + k) mod |h|] of [h]. *)
Definition deal (h : list nat) (start k : nat) : nat := nth ((start + k) mod length h) h 0.

(** One target's pieces ([self]: its rank), with [cnt] the pieces of each
    cell (by its key, [Crossmesh.ckey]) dealt so far; returns them and the
    counts after them. *)
Fixpoint spread1 (sd : list (nat * nat)) (tab : NatMap.t (list src)) (start self : nat) (cnt : NatMap.t nat)
    (ps : list piece) : list piece * NatMap.t nat :=
  match ps with
  | [] => ([], cnt)
  | q :: ps' =>
      let key := ckey sd (pcell q) in
      let h := holders (find_or [] key tab) (pcell q) in
      if memb self h then
        let rest := spread1 sd tab start self cnt ps' in (q :: fst rest, snd rest)
      else
        let k := find_or 0 key cnt in
        let rest := spread1 sd tab start self (NatMap.add key (S k) cnt) ps' in
        (mkpiece (deal h start k) (pcell q) (pbox q) :: fst rest, snd rest)
  end.

(** Every target's pieces in turn ([tr]: the targets' ranks), the counts carried from one to the next. *)
Fixpoint spread (sd : list (nat * nat)) (tab : NatMap.t (list src)) (start : nat) (tr : list nat)
    (cnt : NatMap.t nat) (pss : list (list piece)) : list (list piece) :=
  match pss with
  | [] => []
  | ps :: pss' =>
      let out := spread1 sd tab start (hd 0 tr) cnt ps in
      fst out :: spread sd tab start (tl tr) (snd out) pss'
  end.

(** The cross-mesh schedule of [Crossmesh.xplan] with its senders spread
    over each cell's holders (what [verishard.crossmesh] runs). *)
Definition xplan_bal (m1 : mesh) (r1 : list nat) (t1 : atype) (m2 : mesh) (r2 : list nat) (t2 : atype)
    (start : nat) : option (list (list piece)) :=
  match xplan m1 r1 t1 m2 r2 t2 with
  | Some pss => Some (spread (sdims m1 t1) (holder_table (sdims m1 t1) (srcs m1 r1 t1)) start r2
                             (NatMap.empty nat) pss)
  | None => None
  end.

(** Pieces rank [r] sends to another rank, over a schedule ([tr]: the targets' ranks). *)
Fixpoint nsent (r : nat) (tr : list nat) (pss : list (list piece)) : nat :=
  match pss with
  | [] => 0
  | ps :: pss' => lsum (fun q => if (psrc q =? r) && negb (hd 0 tr =? r) then 1 else 0) ps + nsent r (tl tr) pss'
  end.

(** Elements rank [r] sends to another rank. *)
Fixpoint vsent (r : nat) (tr : list nat) (pss : list (list piece)) : nat :=
  match pss with
  | [] => 0
  | ps :: pss' =>
      lsum (fun q => if (psrc q =? r) && negb (hd 0 tr =? r) then vol (pbox q) else 0) ps + vsent r (tl tr) pss'
  end.

(** Pieces of cell [c] that move (their sender is not their target). *)
Fixpoint nmoved (c : list nat) (tr : list nat) (pss : list (list piece)) : nat :=
  match pss with
  | [] => 0
  | ps :: pss' =>
      lsum (fun q => if nat_list_eqb (pcell q) c && negb (psrc q =? hd 0 tr) then 1 else 0) ps
      + nmoved c (tl tr) pss'
  end.
