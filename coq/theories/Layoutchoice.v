(** Choosing the path for two layouts given as explicit boxes per rank.

    A layout that a pair of types describes exactly ([tlayout]: device [j]
    of the mesh, as world rank [j], holds the valid part of its block,
    [Crossmesh.tbox]) goes to the type planner ([Exchange.ueplan_problem]:
    the collectives, or the exchange where it receives less or the
    collectives exceed the padded bound); any other layout, or types the
    type planner refuses, to the box schedule ([Boxes.brounds]). The types
    are only a proposal: [lplan] checks that they describe exactly the
    given boxes (the same non-empty box per rank) before it uses them.

    Definitions only; proofs in [Layoutchoiceproof.v]. *)
From Coq Require Import List Arith Bool.
From VS Require Import Prelude Mesh Types Uneven Uchecker Crossmesh Rounds Exchange Boxes.
Import ListNotations.

(** The layout of type [t] on [m]: device [j] is world rank [j] and holds
    the valid part of its block. *)
Definition tlayout (m : mesh) (t : atype) : layout := tgts m (ranks m) t.

(** Equality of layouts, each number compared by [Nat.eq_dec] (extracted
    to OCaml's [=]): [decide equality] alone would compare naturals by
    recursion on their value, one call per unit of a box's start (an
    [lplan] at 2^14 devices took 22 s, and a start near 2^50 would not end). *)
Definition interval_eq_dec : forall a b : nat * nat, {a = b} + {a <> b}.
Proof. decide equality; apply Nat.eq_dec. Defined.

Definition holder_eq_dec : forall a b : nat * box, {a = b} + {a <> b}.
Proof. decide equality; [apply (list_eq_dec interval_eq_dec)|apply Nat.eq_dec]. Defined.

Definition layout_eq_dec : forall a b : layout, {a = b} + {a <> b} := list_eq_dec holder_eq_dec.

Definition layout_eqb (a b : layout) : bool := if layout_eq_dec a b then true else false.

(** The entries of a layout that hold some index: a rank with an empty box
    holds nothing, whether a layout lists it (a type's layout lists every
    device) or not (DTensor's boxes leave out empty shards). *)
Definition held_part (l : layout) : layout := filter (fun h => nonempty (snd h)) l.

(** The path taken: the type planner's answer for the types [t], [t'], or
    the box schedule's rounds. *)
Inductive lchoice :=
| ByTypes (t t' : atype) (out : planned ureport)
| ByBoxes (rounds : list (list cut)).

(** From layout [ls] to layout [lt] on mesh [m], with the proposed types
    [types] if any, rounds of at most [budget] elements per rank. The types
    are taken when they describe the same non-empty boxes, in the same
    order, as the layouts. *)
Definition lplan (budget : nat) (m : mesh) (types : option (atype * atype)) (ls lt : layout) : lchoice :=
  (* the box schedule written out in each branch, not bound once: the
     extracted code is strict and would build it on the type path too *)
  match types with
  | Some (t, t') =>
      if layout_eqb (held_part ls) (held_part (tlayout m t))
         && layout_eqb (held_part lt) (held_part (tlayout m t')) then
        match ueplan_problem m t t' with
        | Ok out => ByTypes t t' out
        | Err _ => ByBoxes (brounds budget ls lt)
        end
      else ByBoxes (brounds budget ls lt)
  | None => ByBoxes (brounds budget ls lt)
  end.
