(** Each rank plans only its own part of a cross-mesh schedule.

    A target rank computes the pieces of its own block ([recv1]) and a
    source rank the pieces it sends ([sweep]), from the two layouts alone:
    no list of every target's pieces is built. The sender of a piece a
    target does not hold is dealt over the holders of its cell as in
    [Balance]: the [k]-th target (in target order) that reads the cell from
    another rank gets holder [(start + k) mod |holders|]; here [k] is
    computed in closed form from the targets' boxes ([dealk]: how many
    earlier targets meet the cell and do not hold it), not carried over
    every earlier target's pieces.

    The world schedule [wplan] is the assembly of the per-rank receive
    lists; [Perrankproof] proves that each rank's receive list is its entry,
    that its send list is exactly the world's pieces it sends to other
    ranks, every guarantee of [Crossmeshproof.xplan_correct], and the
    balance bound of [Balanceproof.xplan_bal_balanced].

    Costs, per rank: [recv1] reads its own cells (the window of
    [Crossmesh.cells1]) and, per cell, the boxes of the earlier targets;
    [sweep] reads each target's box once (a test per dimension) and builds
    only the pieces its rank sends.

    Definitions and the executable builders only; proofs in [Perrankproof.v]. *)
From Coq Require Import List Arith Bool.
From VS Require Import Prelude Mesh Types Uneven Crossmesh Balance.
Import ListNotations.

(** [1] when box [T] meets cell [c] (per dimension, a non-empty intersection), else [0]. *)
Fixpoint nmeet (sd : list (nat * nat)) (c : list nat) (T : box) : nat :=
  match sd, c, T with
  | cn :: sd', k :: c', iv :: T' => (if 0 <? snd (isect (fst cn) k iv) then 1 else 0) * nmeet sd' c' T'
  | [], [], [] => 1
  | _, _, _ => 0
  end.

(** The ranks holding cell [c], read from the table of the sources by key. *)
Definition hof (sd : list (nat * nat)) (tab : NatMap.t (list src)) (c : list nat) : list nat :=
  holders (find_or [] (ckey sd c) tab) c.

(** Target [tg] (rank, box) reads cell [c] from another rank: its box meets
    [c] and it does not hold [c]. *)
Definition reads (sd : list (nat * nat)) (tab : NatMap.t (list src)) (c : list nat) (tg : nat * box) : bool :=
  (nmeet sd c (snd tg) =? 1) && negb (memb (fst tg) (hof sd tab c)).

(** The deal index of target [j]'s piece of cell [c]: the targets before it that read [c]. *)
Definition dealk (sd : list (nat * nat)) (tab : NatMap.t (list src)) (c : list nat) (tgs : list (nat * box))
    (j : nat) : nat :=
  length (filter (reads sd tab c) (firstn j tgs)).

(** The sender of a piece: the target itself when it holds the cell, else
    holder [deal h start k]; none when the cell has no holder. *)
Definition choose (h : list nat) (self start k : nat) : option nat :=
  if memb self h then Some self else match h with [] => None | _ => Some (deal h start k) end.

Fixpoint recv_all (sd : list (nat * nat)) (tab : NatMap.t (list src)) (start : nat) (tgs : list (nat * box))
    (j self : nat) (cl : list (list nat * box)) : option (list piece) :=
  match cl with
  | [] => Some []
  | kb :: cl' =>
      match choose (hof sd tab (fst kb)) self start (dealk sd tab (fst kb) tgs j),
            recv_all sd tab start tgs j self cl' with
      | Some r, Some ps => Some (mkpiece r (fst kb) (snd kb) :: ps)
      | _, _ => None
      end
  end.

(** The pieces of target [j]: its box cut by the source cells, each with its sender. *)
Definition recv1 (sd : list (nat * nat)) (tab : NatMap.t (list src)) (start : nat) (tgs : list (nat * box))
    (j : nat) : option (list piece) :=
  match nth_error tgs j with
  | Some tg => if box_okb sd (snd tg) then recv_all sd tab start tgs j (fst tg) (cells sd (snd tg)) else None
  | None => None
  end.

Fixpoint all_some {A} (l : list (option A)) : option (list A) :=
  match l with
  | [] => Some []
  | Some x :: l' => match all_some l' with Some xs => Some (x :: xs) | None => None end
  | None :: _ => None
  end.

(** The sources are one cell per rank, distinct ranks, every cell in range. *)
Definition srcs_okb (sd : list (nat * nat)) (SR : list src) : bool :=
  nodup_fast (map fst SR) && forallb (fun s => cell_okb sd (snd s)) SR.

(** The world schedule: every target's [recv1], in target order. *)
Definition wsched (sd : list (nat * nat)) (SR : list src) (start : nat) (tgs : list (nat * box))
    : option (list (list piece)) :=
  if srcs_okb sd SR then all_some (map (recv1 sd (holder_table sd SR) start tgs) (seq 0 (length tgs))) else None.

(** What source rank [r], holding cell [c] (holders [h]), sends: one pass
    over the targets ([j]: the index of the first, [cnt]: the targets before
    it that read [c]); for each target reading [c], its piece of [c] when
    the deal gives it to [r]. *)
Fixpoint sweep (sd : list (nat * nat)) (tab : NatMap.t (list src)) (start r : nat) (c : list nat) (h : list nat)
    (cnt j : nat) (tgs : list (nat * box)) : list (nat * piece) :=
  match tgs with
  | [] => []
  | tg :: tgs' =>
      if reads sd tab c tg then
        (if deal h start cnt =? r then [(j, mkpiece r c (owned sd c (snd tg)))] else [])
          ++ sweep sd tab start r c h (S cnt) (S j) tgs'
      else sweep sd tab start r c h cnt (S j) tgs'
  end.

(** * On meshes *)

(** The conditions of [Crossmesh.xplan] on the two placements. *)
Definition xguard (m1 : mesh) (r1 : list nat) (t1 : atype) (m2 : mesh) (r2 : list nat) (t2 : atype) : bool :=
  wf_unevenb m1 t1 && wf_unevenb m2 t2 && (length r1 =? ndevices m1) && (length r2 =? ndevices m2)
  && nodup_fast r2 && nat_list_eqb (map gsize t1) (map gsize t2).

(** The world schedule (one entry per target device), senders dealt from holder [start]. *)
Definition wplan (m1 : mesh) (r1 : list nat) (t1 : atype) (m2 : mesh) (r2 : list nat) (t2 : atype) (start : nat)
    : option (list (list piece)) :=
  if xguard m1 r1 t1 m2 r2 t2 then wsched (sdims m1 t1) (srcs m1 r1 t1) start (tgts m2 r2 t2) else None.

(** What target device [j] receives (its pieces, the ones it holds included). *)
Definition rank_recv (m1 : mesh) (r1 : list nat) (t1 : atype) (m2 : mesh) (r2 : list nat) (t2 : atype)
    (start j : nat) : option (list piece) :=
  let sd := sdims m1 t1 in
  let SR := srcs m1 r1 t1 in
  if xguard m1 r1 t1 m2 r2 t2 && srcs_okb sd SR then recv1 sd (holder_table sd SR) start (tgts m2 r2 t2) j
  else None.

(** What source device [i] sends to other ranks: (target device, piece), in target order. *)
Definition rank_send (m1 : mesh) (r1 : list nat) (t1 : atype) (m2 : mesh) (r2 : list nat) (t2 : atype)
    (start i : nat) : option (list (nat * piece)) :=
  let sd := sdims m1 t1 in
  let SR := srcs m1 r1 t1 in
  let tab := holder_table sd SR in
  let c := blocks m1 t1 (coords_of_rank m1 i) in
  if xguard m1 r1 t1 m2 r2 t2 && srcs_okb sd SR then
    Some (sweep sd tab start (nth i r1 0) c (hof sd tab c) 0 0 (tgts m2 r2 t2))
  else None.
