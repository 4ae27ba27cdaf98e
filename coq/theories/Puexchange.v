(** Partial values over uneven types: a pending reduction (sum, max, min:
    any commutative monoid) whose devices hold padded buffers. Planned in
    three steps on the user's mesh: reduce every pending axis of the source
    (an all-reduce on the padded buffers, or a reduce-scatter where it
    receives less), exchange to the target's array
    type ([Exchange.exchange]: valid positions only), make the target's
    pending axes pending (the device numbered 0 in each group keeps its
    block, the others hold the unit). Not proved the least traffic, but
    every step is verified ([Puexchangeproof.puexec_correct]), the plan exists
    for every valid problem ([Puexchangeproof.puplan_total]), its peak is the
    larger padded buffer of the two ends ([Puexchangeproof.puplan_peak]) and
    it receives at least the uneven lower bound of the array types
    ([Puexchangeproof.puplan_lower_bound]).

    Definitions only; proofs in [Puexchangeproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Uneven Uchecker Utraffic Monoid Partial Crossmesh Exchange.
Import ListNotations.

(** Pending axes [P] fit the array type [t]: mesh axes, none twice, none used by [t]. *)
Definition pending_okb (m : mesh) (P : list nat) (t : atype) : bool :=
  nodupb P && forallb (fun a => a <? length m) P && forallb (fun a => negb (memb a (used t))) P.

Definition puvalidb (m : mesh) (src dst : ptype) : bool :=
  match uproblem_error m (ptyp src) (ptyp dst) with
  | Some _ => false
  | None => pending_okb m (paxes src) (ptyp src) && pending_okb m (paxes dst) (ptyp dst)
  end.

(** How the source's pending axes [P] are reduced: by an all-reduce, or by a
    reduce-scatter onto dimension [d] (the uneven slice rule's type [t1]:
    [P] appended to dimension [d]), which receives about half as much and
    leaves a smaller block to exchange. *)
Inductive pustart := PUAllReduce | PUScatter (d : nat) (t1 : atype).

(** The first dimension the uneven slice rule lets [P] be appended to. *)
Fixpoint scatter_dim (m : mesh) (t : atype) (P : list nat) (ds : list nat) : option (nat * atype) :=
  match ds with
  | [] => None
  | d :: ds' =>
      match uapply m t (DynSlice d P) with
      | Ok t1 => Some (d, t1)
      | Err _ => scatter_dim m t P ds'
      end
  end.

(** Elements received per device by each step: the all-reduce as
    [Partial.precv] counts it on the padded buffer, the exchange its worst
    device, the make-pending nothing. No step for no axes. *)
Definition pu_figures (m : mesh) (src dst : ptype) (rx : nat) : list nat :=
  let s := usize_padded m (ptyp src) in
  match paxes src with [] => [] | P => [2 * (s - s / nprod m P)] end
  ++ [rx] ++ match paxes dst with [] => [] | _ => [0] end.

Definition pu_received (m : mesh) (src dst : ptype) (pss : list (list piece)) : list nat :=
  pu_figures m src dst (exchange_recv m pss).

(** The received counts with a reduce-scatter first ([Partial.precv]'s
    figure: [(n - 1)] blocks of the output), the exchange from [t1] after it. *)
Definition pu_rs_figures (m : mesh) (src dst : ptype) (t1 : atype) (rx : nat) : list nat :=
  [(nprod m (paxes src) - 1) * usize_padded m t1; rx]
  ++ match paxes dst with [] => [] | _ => [0] end.

Definition pu_rs_received (m : mesh) (src dst : ptype) (t1 : atype) (pss : list (list piece)) : list nat :=
  pu_rs_figures m src dst t1 (exchange_recv m pss).

(** The planner: how the source is reduced, the exchange's schedule (from
    the array type the reduction leaves) and the received counts of the
    steps, or nothing for an invalid problem. The reduce-scatter is taken
    where the slice rule allows it and the two steps receive strictly less. *)
Definition puplan_problem (m : mesh) (src dst : ptype) : option (pustart * list (list piece) * list nat) :=
  if puvalidb m src dst then
    match exchange m (ptyp src) (ptyp dst) with
    | None => None
    | Some pss =>
        let ar := pu_received m src dst pss in
        let alt :=
          match paxes src with
          | [] => None
          | P =>
              match scatter_dim m (ptyp src) P (seq 0 (length (ptyp src))) with
              | None => None
              | Some (d, t1) =>
                  match exchange m t1 (ptyp dst) with
                  | Some pss1 =>
                      let rs := pu_rs_received m src dst t1 pss1 in
                      if fold_right plus 0 rs <? fold_right plus 0 ar then Some (PUScatter d t1, pss1, rs) else None
                  | None => None
                  end
              end
          end in
        match alt with
        | Some x => Some x
        | None => Some (PUAllReduce, pss, ar)
        end
    end
  else None.

(** How [puplan_problem] reduces, without building a schedule: the same
    choice from the exchanges' figures read from the types
    ([Utraffic.ulower_bound], what the exchange's worst device receives,
    [Exchangeproof.uexchange_lower_bound]; a schedule exists exactly for a
    valid uneven problem, [Exchangeproof.exchange_total]), so that planning
    costs the devices, not devices times fan-in
    ([Puexchangeproof.puplan_start_spec]). *)
Definition puplan_start (m : mesh) (src dst : ptype) : option pustart :=
  if puvalidb m src dst then
    let ar := pu_figures m src dst (ulower_bound m (ptyp src) (ptyp dst)) in
    match paxes src with
    | [] => Some PUAllReduce
    | P =>
        match scatter_dim m (ptyp src) P (seq 0 (length (ptyp src))) with
        | None => Some PUAllReduce
        | Some (d, t1) =>
            match uproblem_error m t1 (ptyp dst) with
            | None =>
                let rs := pu_rs_figures m src dst t1 (ulower_bound m t1 (ptyp dst)) in
                if fold_right plus 0 rs <? fold_right plus 0 ar then Some (PUScatter d t1) else Some PUAllReduce
            | Some _ => Some PUAllReduce
            end
        end
    end
  else None.

(** The array type the reduction leaves: the source's after an all-reduce
    (or with nothing pending), [t1] after a reduce-scatter; the exchange
    starts there. *)
Definition pu_mid (src : ptype) (st : pustart) : atype :=
  match st with PUAllReduce => ptyp src | PUScatter _ t1 => t1 end.

(** The array types the data passes through: the source's, the one the
    reduction leaves, the target's (the make-pending keeps it). *)
Definition pu_types (src dst : ptype) (st : pustart) : list atype := [ptyp src; pu_mid src st; ptyp dst].

(** * Data semantics, on padded buffers *)

(** After the reduction, the local arrays of the array type it leaves
    ([pu_mid]): an all-reduce sums over the pending group; a reduce-scatter
    reads, for the receiving device, where the slice rule [Uneven.usource]
    says. *)
Definition pu_reduced (M : cmonoid) (m : mesh) (src : ptype) (st : pustart)
    (x : coords -> list nat -> carrier M) : coords -> list nat -> carrier M :=
  fun c i =>
    match st with
    | PUAllReduce => gsum M m (paxes src) (fun c' => x c' i) c
    | PUScatter d t1 =>
        match usource m (ptyp src) (DynSlice d (paxes src)) t1 c i with
        | Some (_, i') => gsum M m (paxes src) (fun c' => x c' i') c
        | None => munit M
        end
    end.

(** The exchange from [t0] to [t']: each device assembles its pieces (the
    unit where no piece writes: padding). *)
Definition pu_exchanged (M : cmonoid) (m : mesh) (t0 t' : atype) (pss : list (list piece))
    (y : coords -> list nat -> carrier M) : coords -> list nat -> carrier M :=
  fun c i =>
    match assemble (fun r => y (coords_of_rank m r)) (sdims m t0) (tbox m t' c) (nth (rank m c) pss []) i with
    | Some v => v
    | None => munit M
    end.

(** The make-pending: device 0 of each target pending group keeps its
    block, the others hold the unit. *)
Definition pu_make_pending (M : cmonoid) (m : mesh) (dst : ptype) (z : coords -> list nat -> carrier M)
    : coords -> list nat -> carrier M :=
  fun c i => if mr m (paxes dst) c =? 0 then z c i else munit M.

(** The three steps: reduce over the source's pending groups, exchange,
    make the target's axes pending. *)
Definition puexec (M : cmonoid) (m : mesh) (src dst : ptype) (st : pustart) (pss : list (list piece))
    (x : coords -> list nat -> carrier M) : coords -> list nat -> carrier M :=
  pu_make_pending M m dst (pu_exchanged M m (pu_mid src st) (ptyp dst) pss (pu_reduced M m src st x)).

(** The padded local arrays [x] represent [A] under the partial uneven type
    [pt]: at every valid position the reduction over the device's pending
    group is the element of [A] there. *)
Definition urepresents (M : cmonoid) (m : mesh) (pt : ptype) (A : list nat -> carrier M)
    (x : coords -> list nat -> carrier M) : Prop :=
  forall c i, valid m c -> uvalid_pos m (ptyp pt) c i ->
    gsum M m (paxes pt) (fun c' => x c' i) c = A (ugindex m (ptyp pt) c i).
