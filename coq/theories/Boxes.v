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
From Coq Require Orders Mergesort.
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
    boxes). The holders are keyed by their start along one dimension [d];
    a holder meeting a box [T] along [d] starts in
    [[start(T) + 1 - w, end(T))], [w] the longest holder along [d]. *)
Definition skey (d : nat) (s : nat * box) : nat := fst (nth d (snd s) (0, 0)).

(** The largest [f x] over [l] ([0] for none). *)
Definition maxof {A} (f : A -> nat) (l : list A) : nat := fold_right (fun x m => Nat.max (f x) m) 0 l.

(** The longest holder along [d], and where the last one ends. *)
Definition hwidth (d : nat) (srcs : layout) : nat := maxof (fun s => snd (nth d (snd s) (0, 0))) srcs.
Definition hextent (d : nat) (srcs : layout) : nat := maxof (fun s => skey d s + snd (nth d (snd s) (0, 0))) srcs.

(** The dimension to key on: the one with the most slabs of the longest
    holder's length (a grid's most divided dimension). Any dimension gives
    the same schedule's guarantees; this one reads the fewest holders. *)
Definition slabs (srcs : layout) (d : nat) : nat := hextent d srcs / Nat.max 1 (hwidth d srcs).

Definition best_dim (srcs : layout) : nat :=
  let k := match srcs with (_, B) :: _ => length B | [] => 0 end in
  fst (fold_left (fun acc d => let n := slabs srcs d in if snd acc <? n then (d, n) else acc)
                 (seq 0 k) (0, 0)).

(** A search tree over keyed items: items with a key less than the node's
    on its left, equal in the node, greater on its right. *)
Inductive ktree (A : Type) : Type :=
  | KLeaf (l : list (nat * A))
  | KNode (lt : ktree A) (k : nat) (mid : list (nat * A)) (gt : ktree A).
Arguments KLeaf {A} l.
Arguments KNode {A} lt k mid gt.

(** The tree of [l], split at the key of its middle item: of depth about
    [log2 (length l)] when [l] is sorted by key (each side then holds at
    most half), whatever the order its items are all in it. *)
Fixpoint kbuild {A} (fuel : nat) (l : list (nat * A)) {struct fuel} : ktree A :=
  match fuel, l with
  | S f, x :: _ =>
      let k := fst (nth (length l / 2) l x) in
      KNode (kbuild f (filter (fun y => fst y <? k) l)) k (filter (fun y => fst y =? k) l)
            (kbuild f (filter (fun y => k <? fst y) l))
  | _, _ => KLeaf l
  end.

(** Every item of the tree whose key lies in [[lo, hi)], and perhaps others
    (a leaf gives all its items). *)
Fixpoint kquery {A} (lo hi : nat) (t : ktree A) : list (nat * A) :=
  match t with
  | KLeaf l => l
  | KNode a k mid b =>
      (if lo <? k then kquery lo hi a else [])
      ++ (if (lo <=? k) && (k <? hi) then mid else [])
      ++ (if S k <? hi then kquery lo hi b else [])
  end.

Module HolderLeb <: Orders.TotalLeBool.
  Definition t := (nat * (nat * box))%type.
  Definition leb (x y : t) := fst x <=? fst y.
  Theorem leb_total : forall a1 a2, leb a1 a2 = true \/ leb a2 a1 = true.
  Proof. intros a b. unfold leb. destruct (Nat.le_ge_cases (fst a) (fst b)); [left|right]; apply Nat.leb_le; auto. Qed.
End HolderLeb.

Module HolderSort := Mergesort.Sort HolderLeb.

(** The index of the holders: the dimension keyed on, the longest holder
    along it, and the tree of the holders sorted by their start along it. *)
Definition hindex := (nat * nat * ktree (nat * box))%type.

Definition bindex (srcs : layout) : hindex :=
  let d := best_dim srcs in
  let kl := HolderSort.sort (map (fun s => (skey d s, s)) srcs) in
  (d, hwidth d srcs, kbuild (length kl) kl).

(** The holders of [srcs] (indexed by [ix]) whose boxes meet [T]: those
    starting along the keyed dimension in [T]'s window, then kept where
    their box meets [T] (all of [srcs] where [T] has no such dimension). *)
Definition window (ix : hindex) (srcs : layout) (T : box) : layout :=
  let '(d, w, t) := ix in
  let iv := nth d T (0, 0) in
  filter (fun s => nonempty (bmeet (snd s) T))
    (if d <? length T then map snd (kquery (fst iv + 1 - w) (fst iv + snd iv) t) else srcs).

(** The schedule of target rank [j] with box [T] from the holders meeting
    [T]: [bsched] over those ([Boxesproof.bsched_window_correct]). *)
Definition bsched_in (ix : hindex) (srcs : layout) (j : nat) (T : box) : list (nat * box) :=
  cover (self_first j (window ix srcs T)) [T].

(** The whole world: for every target rank of [tgts] in order, its schedule
    as [Crossmesh.piece]s (sender and global box; no source cell, the
    sender's box is [srcs]'). What [verishard.torch] runs for layouts the
    collectives cannot express. The index is built once ([bplan_in] takes
    it), then each target reads its window. *)
Definition bplan_in (ix : hindex) (srcs tgts : layout) : list (list piece) :=
  map (fun t => map (fun q => mkpiece (fst q) [] (snd q)) (bsched_in ix srcs (fst t) (snd t))) tgts.

Definition bplan (srcs tgts : layout) : list (list piece) := bplan_in (bindex srcs) srcs tgts.

(** Its staged form: the pieces from other ranks cut and packed into rounds
    within [budget] elements per rank ([Rounds.xrounds]). *)
Definition brounds (budget : nat) (srcs tgts : layout) : list (list cut) :=
  xrounds budget (map fst tgts) (bplan srcs tgts).
