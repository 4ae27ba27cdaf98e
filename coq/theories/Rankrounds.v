(** The rounds of one rank's cuts, numbered by a rule every rank evaluates
    alike from its own cuts (no schedule is exchanged).

    A cut is [(tag, sender a, receiver b, bytes)]; the tag is whatever
    names the cut (the caller's key and box; the glue passes an index).
    The cuts of each (sender, receiver) pair, in the order given, go in
    chunks of at most [budget] bytes (a cut larger than the budget alone):
    a cut opens a new chunk when its chunk already holds bytes and adding
    it would pass the budget. Chunk [k] of the pair [a -> b] is round
    [(k W + s) 2 + c], [W] the least power of two of at least the world
    size (and 2), [s = (b - a) mod W], and [c] the bit of [a] at the lowest
    set bit of [s]. Cuts with [a = b] move nothing and are dropped.

    Cost: one pass with a map from pair to its open chunk, one pass with a
    map from round number to its cuts: [O(n log n)] for [n] cuts.

    Definitions and the executable [rank_rounds] only; proofs in
    [Rankroundsproof.v]. *)
From Coq Require Import List Arith Bool.
From VS Require Import Prelude.
Import ListNotations.

Section Rankrounds.
Context {A : Type}.

Definition csrc (x : A * nat * nat * nat) : nat := snd (fst (fst x)).
Definition cdst (x : A * nat * nat * nat) : nat := snd (fst x).
Definition cbytes (x : A * nat * nat * nat) : nat := snd x.

(** The cut belongs to the pair [a -> b]. *)
Definition onpair (a b : nat) (x : A * nat * nat * nat) : bool := (csrc x =? a) && (cdst x =? b).

(** A pair's open chunk [(k, bytes in it)] after one more cut of [n] bytes. *)
Definition step (budget : nat) (st : nat * nat) (n : nat) : nat * nat :=
  if (0 <? snd st) && (budget <? snd st + n) then (S (fst st), n) else (fst st, snd st + n).

(** The chunk state after a pair's cuts [l], in order. *)
Definition runs (budget : nat) (l : list (A * nat * nat * nat)) : nat * nat :=
  fold_left (fun st y => step budget st (cbytes y)) l (0, 0).

(** Each cut with its chunk index, in order; [M]: each pair's open chunk,
    keyed by [a * m + b] ([m] above every receiver). *)
Fixpoint chunks (m budget : nat) (M : NatMap.t (nat * nat)) (l : list (A * nat * nat * nat))
    : list (nat * (A * nat * nat * nat)) :=
  match l with
  | [] => []
  | x :: l' =>
      let key := csrc x * m + cdst x in
      let st := step budget (find_or (0, 0) key M) (cbytes x) in
      (fst st, x) :: chunks m budget (NatMap.add key st M) l'
  end.

(** [W]: the least power of two of at least [n] and 2 ([fuel] steps). *)
Fixpoint widen (fuel p n : nat) : nat :=
  match fuel with 0 => p | S f => if p <? n then widen f (2 * p) n else p end.

Definition width (n : nat) : nat := widen n 2 n.

(** The largest power of two dividing [s] (for [s > 0]); parity by [mod]
    (machine arithmetic once extracted, where [Nat.odd] walks [s]). *)
Fixpoint lowp (fuel s : nat) : nat :=
  match fuel with 0 => 1 | S f => if s mod 2 =? 1 then 1 else 2 * lowp f (s / 2) end.

(** The shift [s = (b - a) mod W] of the pair [a -> b]. *)
Definition shift (w a b : nat) : nat := (b + w - a mod w) mod w.

(** The colour: the bit of [a] at the lowest set bit of the shift. *)
Definition colour (w a b : nat) : nat := (a / lowp (shift w a b) (shift w a b)) mod 2.

(** The round number of chunk [k] of the pair [a -> b]. *)
Definition rid (w k a b : nat) : nat := (k * w + shift w a b) * 2 + colour w a b.

Fixpoint maxdst (l : list (A * nat * nat * nat)) : nat :=
  match l with [] => 0 | x :: l' => Nat.max (cdst x) (maxdst l') end.

(** The cuts that move (sender and receiver differ). *)
Definition moving (l : list (A * nat * nat * nat)) : list (A * nat * nat * nat) :=
  filter (fun x => negb (csrc x =? cdst x)) l.

(** Each moving cut with its round number, in the order given. *)
Definition numbered (world budget : nat) (l : list (A * nat * nat * nat)) : list (nat * (A * nat * nat * nat)) :=
  let mv := moving l in
  map (fun kx => (rid (width world) (fst kx) (csrc (snd kx)) (cdst (snd kx)), snd kx))
      (chunks (S (maxdst mv)) budget (NatMap.empty _) mv).

(** The cuts of each round, reversed, keyed by round number. *)
Fixpoint bucket (M : NatMap.t (list (A * nat * nat * nat))) (l : list (nat * (A * nat * nat * nat)))
    : NatMap.t (list (A * nat * nat * nat)) :=
  match l with
  | [] => M
  | (t, x) :: l' => bucket (NatMap.add t (x :: find_or [] t M) M) l'
  end.

(** The rounds of a rank's cuts: round numbers in increasing order, each
    with its cuts in the order given. *)
Definition rank_rounds (world budget : nat) (l : list (A * nat * nat * nat))
    : list (nat * list (A * nat * nat * nat)) :=
  map (fun tc => (fst tc, rev (snd tc))) (NatMap.elements (bucket (NatMap.empty _) (numbered world budget l))).

End Rankrounds.
