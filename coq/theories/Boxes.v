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
    layout, staged in rounds, each target reading only the holders whose
    boxes meet its own ([window], from an index built once over the
    holders: [bindex]). Definitions only; proofs in [Boxesproof.v] and,
    for the whole world, [Boxesworldproof.v]. *)
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

(** An index of the holders for reading, per target box, only the holders
    that may meet it (without it every target reads every holder: the
    whole world is quadratic in the ranks, 87 s for [2^14] one-element
    boxes): a tree whose every node splits its holders along one dimension
    and knows where along it they start and end, so a box outside that
    span skips all of them. *)
Definition skey (e : nat) (s : nat * box) : nat := fst (nth e (snd s) (0, 0)).

(** Where a holder ends along [e]. *)
Definition send (e : nat) (s : nat * box) : nat := skey e s + snd (nth e (snd s) (0, 0)).

(** The largest and the least [f x] over [l] ([0], [d] for none). *)
Definition maxof {A} (f : A -> nat) (l : list A) : nat := fold_right (fun x m => Nat.max (f x) m) 0 l.
Definition minof {A} (f : A -> nat) (l : list A) (d : nat) : nat := fold_right (fun x m => Nat.min (f x) m) d l.

(** The number of dimensions of the holders' boxes (the first's). *)
Definition hdims (srcs : layout) : nat := match srcs with (_, B) :: _ => length B | [] => 0 end.

(** How far apart the holders' starts are along [e]. *)
Definition spread (l : layout) (e : nat) : nat :=
  match l with [] => 0 | x :: _ => maxof (skey e) l - minof (skey e) l (skey e x) end.

(** The dimension to split on: the one along which the starts are the
    farthest apart. Any dimension gives the same guarantees; this one
    splits the holders best. *)
Definition best_dim (l : layout) : nat :=
  fst (fold_left (fun acc e => let n := spread l e in if snd acc <? n then (e, n) else acc)
                 (seq 0 (hdims l)) (0, 0)).

(** A tree of holders: a node splits its holders along a dimension [e] (by
    their starts), and keeps the least start [lo] and the greatest end [hi]
    of all of them along [e]. *)
Inductive ktree : Type :=
  | KLeaf (l : layout)
  | KNode (e lo hi : nat) (a b : ktree).

(** The tree of [l]: each node splits along [best_dim] at the middle of its
    starts (both sides then non-empty and, after as many splits as bits in
    the starts, alone); holders that all start at the same corner make a
    leaf. Whatever the fuel, every holder is in it. *)
Fixpoint kbuild (fuel : nat) (l : layout) {struct fuel} : ktree :=
  match fuel, l with
  | S f, x :: _ =>
      let e := best_dim l in
      let lo := minof (skey e) l (skey e x) in
      let k := lo + (maxof (skey e) l - lo) / 2 in
      match filter (fun s => k <? skey e s) l with
      | [] => KLeaf l
      | upper => KNode e lo (maxof (send e) l) (kbuild f (filter (fun s => skey e s <=? k) l)) (kbuild f upper)
      end
  | _, _ => KLeaf l
  end.

(** Whether the interval [[lo, hi)] meets [T] along [e] (yes where [T]
    has no dimension [e]). *)
Definition meets1 (T : box) (e lo hi : nat) : bool :=
  negb (e <? length T) || ((fst (nth e T (0, 0)) <? hi) && (lo <? fst (nth e T (0, 0)) + snd (nth e T (0, 0)))).

(** Every holder of the tree meeting [T], and perhaps others (a leaf gives
    all its own). *)
Fixpoint kquery (T : box) (t : ktree) : layout :=
  match t with
  | KLeaf l => l
  | KNode e lo hi a b => if meets1 T e lo hi then kquery T a ++ kquery T b else []
  end.

(** The index of the holders, built once. *)
Definition bindex (srcs : layout) : ktree := kbuild (length srcs) srcs.

(** The holders (indexed by [ix]) whose boxes meet [T]: those the tree
    gives, kept where their box meets [T]. *)
Definition window (ix : ktree) (T : box) : layout :=
  filter (fun s => nonempty (bmeet (snd s) T)) (kquery T ix).

(** The schedule of target rank [j] with box [T] from the holders meeting
    [T]: [bsched] over those ([Boxesproof.bsched_in_correct]). *)
Definition bsched_in (ix : ktree) (j : nat) (T : box) : list (nat * box) :=
  cover (self_first j (window ix T)) [T].

(** The whole world: for every target rank of [tgts] in order, its schedule
    as [Crossmesh.piece]s (sender and global box; no source cell, the
    sender's box is [srcs]'). What [verishard.torch] runs for layouts the
    collectives cannot express. The index is built once ([bplan_in] takes
    it), then each target reads its window. *)
Definition bplan_in (ix : ktree) (tgts : layout) : list (list piece) :=
  map (fun t => map (fun q => mkpiece (fst q) [] (snd q)) (bsched_in ix (fst t) (snd t))) tgts.

Definition bplan (srcs tgts : layout) : list (list piece) := bplan_in (bindex srcs) tgts.

(** Its staged form: the pieces from other ranks cut and packed into rounds
    within [budget] elements per rank ([Rounds.xrounds]). *)
Definition brounds (budget : nat) (srcs tgts : layout) : list (list cut) :=
  xrounds budget (map fst tgts) (bplan srcs tgts).
