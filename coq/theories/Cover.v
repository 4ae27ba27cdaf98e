(** Whether a layout of explicit boxes ([Boxes.layout]) holds every index
    of a box, and the precondition the box schedule's callers check: the
    source layout covers the global array and every target box lies in it
    ([bcovers]). Then every target rank ends with every index of its box
    ([Coverproof.brounds_complete]); without it, [Boxes.bplan] delivers
    only the indices some rank holds ([Boxesworldproof.brounds_correct]).
    Definitions only; proofs in [Coverproof.v]. *)
From Coq Require Import List Arith Bool.
From VS Require Import Crossmesh Boxes.
Import ListNotations.

(** One holder's box [B] taken out of the boxes [rem]: a box that meets
    [B] is cut by box subtraction ([Boxes.bsub], empty pieces dropped), one
    that does not is kept whole (cutting it would only split it). *)
Definition take_out (B : box) (rem : list box) : list box :=
  flat_map (fun R => if nonempty (bmeet R B) then filter nonempty (bsub R B) else [R]) rem.

(** The part of the boxes [rem] that no holder of [srcs] holds, as boxes. *)
Fixpoint unheld (srcs : layout) (rem : list box) : list box :=
  match srcs with
  | [] => rem
  | (_, B) :: srcs' => unheld srcs' (take_out B rem)
  end.

(** Whether the holders [srcs] hold every index of [T]: nothing of it is left. *)
Definition holds_box (srcs : layout) (T : box) : bool :=
  forallb (fun R => negb (nonempty R)) (unheld srcs [T]).

(** The global array of shape [shape] as one box. *)
Definition whole (shape : list nat) : box := map (fun n => (0, n)) shape.

(** The box schedule's precondition: the source layout [srcs] holds every
    index of the array of shape [shape], and every target box lies in the
    array. *)
Definition bcovers (shape : list nat) (srcs tgts : layout) : bool :=
  holds_box srcs (whole shape) && forallb (fun t => holds_box [(0, whole shape)] (snd t)) tgts.
