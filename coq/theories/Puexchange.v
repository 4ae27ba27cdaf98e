(** Partial values over uneven types: a pending reduction (sum, max, min:
    any commutative monoid) whose devices hold padded buffers. Planned in
    three steps on the user's mesh: reduce every pending axis of the source
    (an all-reduce on the padded buffers), exchange to the target's array
    type ([Exchange.exchange]: valid positions only), make the target's
    pending axes pending (the device numbered 0 in each group keeps its
    block, the others hold the unit). Not the least traffic (a
    reduce-scatter onto an uneven dimension is not modelled), but every
    step is verified ([Puexchangeproof.puexec_correct]) and the plan exists
    for every valid problem ([Puexchangeproof.puplan_total]).

    Definitions only; proofs in [Puexchangeproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Uneven Uchecker Monoid Partial Crossmesh Exchange.
Import ListNotations.

(** Pending axes [P] fit the array type [t]: mesh axes, none twice, none used by [t]. *)
Definition pending_okb (m : mesh) (P : list nat) (t : atype) : bool :=
  nodupb P && forallb (fun a => a <? length m) P && forallb (fun a => negb (memb a (used t))) P.

Definition puvalidb (m : mesh) (src dst : ptype) : bool :=
  match uproblem_error m (ptyp src) (ptyp dst) with
  | Some _ => false
  | None => pending_okb m (paxes src) (ptyp src) && pending_okb m (paxes dst) (ptyp dst)
  end.

(** Elements received per device by each step: the all-reduce as
    [Partial.precv] counts it on the padded buffer, the exchange its worst
    device, the make-pending nothing. No step for no axes. *)
Definition pu_received (m : mesh) (src dst : ptype) (pss : list (list piece)) : list nat :=
  let s := usize_padded m (ptyp src) in
  match paxes src with [] => [] | P => [2 * (s - s / nprod m P)] end
  ++ [exchange_recv m pss] ++ match paxes dst with [] => [] | _ => [0] end.

(** The planner: the exchange's schedule and the received counts of the
    three steps, or nothing for an invalid problem. Every type along the
    plan has the padded size of one end, so the peak is [ubound]. *)
Definition puplan_problem (m : mesh) (src dst : ptype) : option (list (list piece) * list nat) :=
  if puvalidb m src dst then
    match exchange m (ptyp src) (ptyp dst) with
    | Some pss => Some (pss, pu_received m src dst pss)
    | None => None
    end
  else None.

(** * Data semantics, on padded buffers *)

(** The three steps: reduce over the source's pending groups, assemble the
    exchange's pieces (the unit where no piece writes: padding), keep the
    block on device 0 of each target pending group and the unit elsewhere. *)
Definition puexec (M : cmonoid) (m : mesh) (src dst : ptype) (pss : list (list piece))
    (x : coords -> list nat -> carrier M) : coords -> list nat -> carrier M :=
  let y := fun c i => gsum M m (paxes src) (fun c' => x c' i) c in
  let z := fun c i =>
    match assemble (fun r => y (coords_of_rank m r)) (sdims m (ptyp src)) (tbox m (ptyp dst) c)
                   (nth (rank m c) pss []) i with
    | Some v => v
    | None => munit M
    end in
  fun c i => if mr m (paxes dst) c =? 0 then z c i else munit M.

(** The padded local arrays [x] represent [A] under the partial uneven type
    [pt]: at every valid position the reduction over the device's pending
    group is the element of [A] there. *)
Definition urepresents (M : cmonoid) (m : mesh) (pt : ptype) (A : list nat -> carrier M)
    (x : coords -> list nat -> carrier M) : Prop :=
  forall c i, valid m c -> uvalid_pos m (ptyp pt) c i ->
    gsum M m (paxes pt) (fun c' => x c' i) c = A (ugindex m (ptyp pt) c i).
