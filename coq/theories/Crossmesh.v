(** Cross-mesh redistribution: moving an array from one placement (a mesh, a
    rank list into one world, a type) to another, point to point.

    Per dimension a device's block is an index interval [start, start + len).
    A source dimension is described by its block size [c] and its number of
    blocks [n]: block [k] is [[k c, (k + 1) c)] (for uneven dimensions, its
    valid part is that interval cut at the global size [g]; every target
    interval lies in [[0, g)], so the intersections are the same). A target
    device's block is a box: one interval per dimension.

    For each target device the schedule lists pieces: a box, the source block
    (cell) it lies in, and the one source rank chosen to send it (the target
    itself when it holds the cell, otherwise the holders of the cell in
    rotation by target index, to balance senders among replicas).

    Definitions and the executable builder only; proofs in [Crossmeshproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Uneven.
Import ListNotations.

Definition interval := (nat * nat)%type.
Definition box := list interval.

Definition insideb (x : nat) (iv : interval) : bool := (fst iv <=? x) && (x <? fst iv + snd iv).

(** A global index [p] lies in the box [B] (one interval per dimension). *)
Fixpoint in_boxb (p : list nat) (B : box) : bool :=
  match p, B with
  | [], [] => true
  | x :: p', iv :: B' => insideb x iv && in_boxb p' B'
  | _, _ => false
  end.

(** Elements of a box. *)
Definition vol (B : box) : nat := prod (map snd B).

(** Sum of [f] over a list. *)
Definition lsum {A} (f : A -> nat) (l : list A) : nat := fold_right (fun x acc => f x + acc) 0 l.

(** Intersection of source block [k] of block size [c] with the interval [iv]. *)
Definition isect (c k : nat) (iv : interval) : interval :=
  let lo := Nat.max (k * c) (fst iv) in
  (lo, Nat.min (S k * c) (fst iv + snd iv) - lo).

(** One dimension: the source blocks [(k, intersection)] meeting [iv]
    ([cn = (c, n)]: block size, number of blocks), read off every block. *)
Definition cells1_all (cn : nat * nat) (iv : interval) : list (nat * interval) :=
  filter (fun kv => 0 <? snd (snd kv)) (map (fun k => (k, isect (fst cn) k iv)) (seq 0 (snd cn))).

(** The same ([Crossmeshproof.cells1_window]), reading only the blocks from
    the one holding the start of [iv] to the one past its end: a target
    then costs its own cells, not every block of the source. *)
Definition cells1 (cn : nat * nat) (iv : interval) : list (nat * interval) :=
  let lo := Nat.min (fst iv / fst cn) (snd cn) in
  filter (fun kv => 0 <? snd (snd kv))
    (map (fun k => (k, isect (fst cn) k iv)) (seq lo (Nat.min (snd cn) (S ((fst iv + snd iv) / fst cn)) - lo))).

Fixpoint cellsl (sd : list (nat * nat)) (T : box) : list (list (nat * interval)) :=
  match sd, T with
  | cn :: sd', iv :: T' => cells1 cn iv :: cellsl sd' T'
  | _, _ => []
  end.

(** Cartesian product of the per-dimension lists: a cell vector and its box. *)
Fixpoint cart (ls : list (list (nat * interval))) : list (list nat * box) :=
  match ls with
  | [] => [([], [])]
  | l :: ls' => flat_map (fun kv => map (fun kb => (fst kv :: fst kb, snd kv :: snd kb)) (cart ls')) l
  end.

(** The multi-dimensional intersections of a target box with the source cells. *)
Definition cells (sd : list (nat * nat)) (T : box) : list (list nat * box) := cart (cellsl sd T).

(** The whole source block (cell) [ks]: [[k c, k c + c)] per dimension. *)
Fixpoint cellbox (sd : list (nat * nat)) (ks : list nat) : box :=
  match sd, ks with
  | cn :: sd', k :: ks' => (k * fst cn, fst cn) :: cellbox sd' ks'
  | _, _ => []
  end.

(** The part of target box [T] inside cell [b]. *)
Fixpoint owned (sd : list (nat * nat)) (b : list nat) (T : box) : box :=
  match sd, b, T with
  | cn :: sd', k :: b', iv :: T' => isect (fst cn) k iv :: owned sd' b' T'
  | _, _, _ => []
  end.

(** Sources: a world rank and the cell (block vector) it holds. *)
Definition src := (nat * list nat)%type.

Definition holders (SR : list src) (ks : list nat) : list nat :=
  map fst (filter (fun s => nat_list_eqb (snd s) ks) SR).

(** The sender of cell [ks] to the target of rank [self] and index [j]. *)
Definition pick_from (h : list nat) (self j : nat) : option nat :=
  if memb self h then Some self else nth_error h (j mod length h).

Definition pick (SR : list src) (self j : nat) (ks : list nat) : option nat := pick_from (holders SR ks) self j.

Record piece := mkpiece { psrc : nat; pcell : list nat; pbox : box }.

Fixpoint pick_all (SR : list src) (self j : nat) (cl : list (list nat * box)) : option (list piece) :=
  match cl with
  | [] => Some []
  | kb :: cl' =>
      match pick SR self j (fst kb), pick_all SR self j cl' with
      | Some r, Some ps => Some (mkpiece r (fst kb) (snd kb) :: ps)
      | _, _ => None
      end
  end.

(** Shape checks: every block size positive, every non-empty target
    interval within the [n] blocks, every source cell vector of the right length and range. *)
Fixpoint box_okb (sd : list (nat * nat)) (T : box) : bool :=
  match sd, T with
  | [], [] => true
  | cn :: sd', iv :: T' =>
      (0 <? fst cn) && ((snd iv =? 0) || (fst iv + snd iv <=? snd cn * fst cn)) && box_okb sd' T'
  | _, _ => false
  end.

Fixpoint cell_okb (sd : list (nat * nat)) (b : list nat) : bool :=
  match sd, b with
  | [], [] => true
  | cn :: sd', k :: b' => (k <? snd cn) && cell_okb sd' b'
  | _, _ => false
  end.

(** The schedule of one target (rank [fst tg], box [snd tg], index [j]). *)
Definition sched1 (sd : list (nat * nat)) (SR : list src) (j : nat) (tg : nat * box) : option (list piece) :=
  if box_okb sd (snd tg) then pick_all SR (fst tg) j (cells sd (snd tg)) else None.

Fixpoint sched_from (sd : list (nat * nat)) (SR : list src) (j : nat) (tgs : list (nat * box))
  : option (list (list piece)) :=
  match tgs with
  | [] => Some []
  | tg :: tgs' =>
      match sched1 sd SR j tg, sched_from sd SR (S j) tgs' with
      | Some ps, Some pss => Some (ps :: pss)
      | _, _ => None
      end
  end.

(** * The same schedule, with each cell's holders looked up

    [holders SR ks] reads every source: once per cell of every target, so
    [sched_from] takes time cubic in the devices when every target reads
    every cell (a gather onto every device of another mesh). [sched_in]
    builds the same schedule ([Crossmeshproof.sched_in_eq]) from a table of
    the sources by their cell's key, built once, reading only the sources
    of a cell's key. *)

(** A cell's key: its block numbers in mixed radix over the numbers of
    blocks (distinct cells of a placement have distinct keys; a shared key
    would only cost time, since the sources of a key are filtered by cell). *)
Fixpoint ckey (sd : list (nat * nat)) (ks : list nat) : nat :=
  match sd, ks with
  | cn :: sd', k :: ks' => k + snd cn * ckey sd' ks'
  | _, _ => 0
  end.

(** The sources of each key, in their order in [SR]. *)
Definition holder_table (sd : list (nat * nat)) (SR : list src) : NatMap.t (list src) :=
  fold_right (fun s tab => let k := ckey sd (snd s) in NatMap.add k (s :: find_or [] k tab) tab)
             (NatMap.empty (list src)) SR.

Fixpoint pick_all_in (sd : list (nat * nat)) (tab : NatMap.t (list src)) (self j : nat)
    (cl : list (list nat * box)) : option (list piece) :=
  match cl with
  | [] => Some []
  | kb :: cl' =>
      match pick_from (holders (find_or [] (ckey sd (fst kb)) tab) (fst kb)) self j, pick_all_in sd tab self j cl' with
      | Some r, Some ps => Some (mkpiece r (fst kb) (snd kb) :: ps)
      | _, _ => None
      end
  end.

Fixpoint sched_in (sd : list (nat * nat)) (tab : NatMap.t (list src)) (j : nat) (tgs : list (nat * box))
  : option (list (list piece)) :=
  match tgs with
  | [] => Some []
  | tg :: tgs' =>
      match (if box_okb sd (snd tg) then pick_all_in sd tab (fst tg) j (cells sd (snd tg)) else None),
            sched_in sd tab (S j) tgs' with
      | Some ps, Some pss => Some (ps :: pss)
      | _, _ => None
      end
  end.

(** The schedule of every target, in target order. *)
Definition xsched (sd : list (nat * nat)) (SR : list src) (tgs : list (nat * box))
  : option (list (list piece)) :=
  if nodup_fast (map fst SR) && forallb (fun s => cell_okb sd (snd s)) SR
  then sched_in sd (holder_table sd SR) 0 tgs else None.

(** What a target of rank [self] already holds of its box [T]: the part of
    its own source cell, when it is a source. *)
Definition held (sd : list (nat * nat)) (SR : list src) (self : nat) (T : box) : nat :=
  match find (fun s => fst s =? self) SR with
  | Some s => vol (owned sd (snd s) T)
  | None => 0
  end.

(** Elements a target receives from other ranks. *)
Definition traffic (self : nat) (ps : list piece) : nat :=
  lsum (fun q => if psrc q =? self then 0 else vol (pbox q)) ps.

(** * Data semantics *)

(** Global index [p] from the corner of [B] shifted by [i], and back. *)
Fixpoint shift (B : box) (i : list nat) : list nat :=
  match B, i with
  | iv :: B', x :: i' => fst iv + x :: shift B' i'
  | _, _ => []
  end.

Fixpoint unshift (B : box) (p : list nat) : list nat :=
  match B, p with
  | iv :: B', x :: p' => x - fst iv :: unshift B' p'
  | _, _ => []
  end.

(** Source distribution of a global array [A]: the rank holding cell [b]
    holds at local index [i] the element [A (shift (cellbox sd b) i)]. *)
Definition is_source {V} (A : list nat -> V) (sd : list (nat * nat)) (SR : list src)
  (L : nat -> list nat -> V) : Prop :=
  forall r b, In (r, b) SR -> forall i, L r i = A (shift (cellbox sd b) i).

(** What a target receives at local index [i] of its box [T]: the element
    the piece containing that global index carries, read from its sender's
    local array at the offset within the sender's cell. *)
Definition assemble {V} (L : nat -> list nat -> V) (sd : list (nat * nat)) (T : box) (ps : list piece)
  (i : list nat) : option V :=
  let p := shift T i in
  match find (fun q => in_boxb p (pbox q)) ps with
  | Some q => Some (L (psrc q) (unshift (cellbox sd (pcell q)) p))
  | None => None
  end.

(** * Placements on meshes *)

(** Source dimensions of type [t] on mesh [m]: block size [ceil(g / n)] and
    [n] blocks ([g / n] when [n] divides [g]). *)
Definition sdims (m : mesh) (t : atype) : list (nat * nat) :=
  map (fun D => (ucsize m D, nprod m (axes D))) t.

(** The source ranks: device [i] of [m] is world rank [nth i r 0]
    ([Crossmeshproof.srcs_nth]), read along [r]. *)
Definition srcs (m : mesh) (r : list nat) (t : atype) : list src :=
  map_along 0 (fun ri i => (ri, blocks m t (coords_of_rank m i))) r 0 (ndevices m).

(** The block of device [c] under [t]: the valid part of its block per dimension. *)
Definition tbox (m : mesh) (t : atype) (c : coords) : box :=
  map (fun D => (ugidx m D c 0, uvlen m D c)) t.

(** The targets: device [j] of [m] is world rank [nth j r 0] ([Crossmeshproof.tgts_nth_map]). *)
Definition tgts (m : mesh) (r : list nat) (t : atype) : list (nat * box) :=
  map_along 0 (fun rj j => (rj, tbox m t (coords_of_rank m j))) r 0 (ndevices m).

(** The cross-mesh schedule builder (what [verishard.crossmesh] runs): both
    types well formed (uneven allowed), one world rank per device, target
    ranks distinct, the same global shape. *)
Definition xplan (m1 : mesh) (r1 : list nat) (t1 : atype) (m2 : mesh) (r2 : list nat) (t2 : atype)
  : option (list (list piece)) :=
  if wf_unevenb m1 t1 && wf_unevenb m2 t2 && (length r1 =? ndevices m1) && (length r2 =? ndevices m2)
     && nodup_fast r2 && nat_list_eqb (map gsize t1) (map gsize t2)
  then xsched (sdims m1 t1) (srcs m1 r1 t1) (tgts m2 r2 t2) else None.
