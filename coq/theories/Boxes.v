(** Layouts as explicit boxes: every rank of a world holds one box of the
    global array (an index interval per dimension, possibly empty, possibly
    held by several ranks). This generalizes the source side of
    [Crossmesh.xplan], whose source blocks form a grid of equal cells: any
    layout whose blocks are boxes (DTensor's nested [torch.chunk] shards,
    uneven and even blocks, a different device set) is one.

    For a target rank [j] and its box [T], [bsched] lists pieces (sender,
    box): the part of [T] that [j] holds itself first, then, source by
    source, the part of what is still missing that the source holds; what is
    missing is kept as a list of disjoint boxes, cut by box subtraction
    ([bsub]). [bplan] and [brounds] do it for every target rank of a
    layout, staged in rounds. Definitions only; proofs in [Boxesproof.v]
    and, for the whole world, [Boxesworldproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Crossmesh Rounds.
Import ListNotations.

(** A layout: (world rank, its box) per holder. *)
Definition layout := list (nat * box).

(** The intersection of two intervals, [(start, length)]. *)
Definition imeet (a b : interval) : interval :=
  let lo := Nat.max (fst a) (fst b) in
  (lo, Nat.min (fst a + snd a) (fst b + snd b) - lo).

(** The intersection of two boxes, dimension by dimension. *)
Fixpoint bmeet (A B : box) : box :=
  match A, B with
  | a :: A', b :: B' => imeet a b :: bmeet A' B'
  | _, _ => []
  end.

(** [A] less [B] as disjoint boxes: along the first dimension the part of
    [a] before [b] and the part after it (whole in the other dimensions),
    and over their overlap the boxes of [A' \ B'] in the other dimensions. *)
Fixpoint bsub (A B : box) : list box :=
  match A, B with
  | [], [] => []
  | a :: A', b :: B' =>
      let e := fst a + snd a in
      let f := fst b + snd b in
      ((fst a, Nat.min e (fst b) - fst a) :: A')
      :: ((Nat.max (fst a) f, e - Nat.max (fst a) f) :: A')
      :: map (fun R => imeet a b :: R) (bsub A' B')
  | _, _ => [A]
  end.

(** Whether a box holds some index: no dimension of length 0. *)
Definition nonempty (B : box) : bool := forallb (fun iv => 0 <? snd iv) B.

(** Pieces covering the boxes [rem] from the holders [srcs] in order: each
    holder sends the part of the missing boxes it holds, the rest stays
    missing. Empty boxes are dropped as they appear (they hold no index; a
    subtraction makes up to two per dimension, which would otherwise
    multiply from holder to holder). *)
Fixpoint cover (srcs : layout) (rem : list box) : list (nat * box) :=
  match srcs with
  | [] => []
  | (r, B) :: srcs' =>
      filter (fun q => nonempty (snd q)) (map (fun R => (r, bmeet R B)) rem)
      ++ cover srcs' (filter nonempty (flat_map (fun R => bsub R B) rem))
  end.

(** The holders with rank [j] first (what [j] holds comes from itself). *)
Definition self_first (j : nat) (srcs : layout) : layout :=
  filter (fun s => fst s =? j) srcs ++ filter (fun s => negb (fst s =? j)) srcs.

(** The schedule of target rank [j] with box [T]. *)
Definition bsched (srcs : layout) (j : nat) (T : box) : list (nat * box) :=
  cover (self_first j srcs) [T].

(** How many boxes of [L] hold the index [p]. *)
Definition hits (p : list nat) (L : list box) : nat := length (filter (in_boxb p) L).

(** Whether some holder's box holds [p]. *)
Definition held_by_any (p : list nat) (srcs : layout) : bool := existsb (fun s => in_boxb p (snd s)) srcs.

(** The first holder of [p] in [srcs]. *)
Fixpoint first_holder (p : list nat) (srcs : layout) : option nat :=
  match srcs with
  | [] => None
  | (r, B) :: srcs' => if in_boxb p B then Some r else first_holder p srcs'
  end.

(** The whole world: for every target rank of [tgts] in order, its schedule
    as [Crossmesh.piece]s (sender and global box; no source cell, the
    sender's box is [srcs]'). What [verishard.torch] runs for layouts the
    collectives cannot express. *)
Definition bplan (srcs tgts : layout) : list (list piece) :=
  map (fun t => map (fun q => mkpiece (fst q) [] (snd q)) (bsched srcs (fst t) (snd t))) tgts.

(** Its staged form: the pieces from other ranks cut and packed into rounds
    within [budget] elements per rank ([Rounds.xrounds]). *)
Definition brounds (budget : nat) (srcs tgts : layout) : list (list cut) :=
  xrounds budget (map fst tgts) (bplan srcs tgts).
