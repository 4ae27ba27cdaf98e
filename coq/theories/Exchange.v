(** The exchange: a fifth kind of step, within one mesh, in which every
    device receives from the others exactly the elements of its target block
    it does not hold (an [Alltoallv] with the send lists of the cross-mesh
    schedule, [Crossmesh.xplan], on the same mesh and ranks on both sides).
    It reaches the transfer lower bound where the four collectives cannot.

    The planner takes it only when it receives strictly less than the
    collective plan and it can run in pieces along a free dimension (one no
    axis shards, in the source or the target): piece [p] of the output then
    reads only piece [p] of the input ([Exchangeproof.exchange_chunk]), so
    the chunked schedule holds what [Chunk.held] counts, within
    [max(size src, size dst)] plus one piece ([Chunkproof.held_bound]).

    Definitions only; proofs in [Exchangeproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Traffic Validate Refine Pipeline Uneven Uchecker Upipeline Utraffic
  Crossmesh.
Import ListNotations.

(** The devices of [m], each its own world rank. *)
Definition ranks (m : mesh) : list nat := seq 0 (ndevices m).

(** The exchange schedule from [t] to [t'] within [m]: per device (in rank
    order) the pieces it receives, each from one device holding it. *)
Definition exchange (m : mesh) (t t' : atype) : option (list (list piece)) :=
  xplan m (ranks m) t m (ranks m) t'.

(** Elements the worst device receives from others: the largest
    [Crossmesh.traffic j (nth j pss [])] over [ranks m]
    ([Exchangeproof.exchange_recv_nth]), read along [pss]. *)
Definition exchange_recv (m : mesh) (pss : list (list piece)) : nat :=
  fold_right Nat.max 0 (map_along [] (fun ps j => Crossmesh.traffic j ps) pss 0 (ndevices m)).

(** The first dimension (from index [d]) that neither type shards and that
    has at least two indices to cut. *)
Fixpoint free_from (d : nat) (t t' : atype) : option nat :=
  match t, t' with
  | D :: u, D' :: u' =>
      if match axes D, axes D' with [], [] => 2 <=? gsize D | _, _ => false end
      then Some d else free_from (S d) u u'
  | _, _ => None
  end.

Definition free_dim (t t' : atype) : option nat := free_from 0 t t'.

(** A plan step: one of the four collectives, or an exchange to a type. *)
Inductive estep := Coll (c : coll) | Exch (t' : atype).

Fixpoint colls (p : list estep) : option plan :=
  match p with
  | [] => Some []
  | Coll c :: p' => match colls p' with Some cs => Some (c :: cs) | None => None end
  | Exch _ :: _ => None
  end.

(** Position (from 0) of a plan's first exchange. *)
Fixpoint exch_pos (p : list estep) : nat :=
  match p with
  | Coll _ :: p' => S (exch_pos p')
  | _ => 0
  end.

(** The checker over plans that may hold an exchange, over a base checker
    ([base]: [Checker.check] or [Uchecker.ucheck] on the problem). A plan of
    collectives is the base checker's; an exchange is a plan's only step
    (its input is the source): it is accepted when the problem is valid
    ([perr] is [None]) and it ends at the target, with the report [rep].
    The schedule is not built: it exists for every valid problem
    ([Exchangeproof.exchange_total]) and its worst device receives the
    lower bound ([exchange_lower_bound], [uexchange_lower_bound]), which
    [rep] reads from the types; building it would take a piece per source
    block each target meets, devices times fan-in. An exchange among other
    steps is refused at its position. *)
Definition echeck_with {R} (perr : option error) (base : plan -> result (nat * error) R) (rep : R)
    (dst : atype) (p : list estep) : result (nat * error) R :=
  match p with
  | [Exch t'] =>
      match perr with
      | Some e => Err (0, e)
      | None => if atype_eqb t' dst then Ok rep else Err (1, WrongResult)
      end
  | _ =>
      match colls p with
      | Some cs => base cs
      | None => Err (S (exch_pos p), BadTarget)
      end
  end.

(** Plain types: the report has the two types, the peak
    [max(size src, size dst)] and what the worst device receives. *)
Definition echeck (m : mesh) (src dst : atype) (p : list estep) : result (nat * error) report :=
  echeck_with (problem_error m src dst) (check m src dst)
    (mkreport [src; dst] (peak_of m [src; dst]) [Traffic.lower_bound m src dst]) dst p.

(** The planner: [Pipeline.plan_problem]'s plan of collectives, unless the
    exchange receives strictly less and can run in pieces along a free
    dimension [ch]; then the one-step plan [[Exch dst]], with [ch] and what
    the worst device receives. *)
Inductive planned (R : Type) :=
| Collectives (fs : split) (p : plan) (r : R)
| Exchanged (ch : option nat) (rx : nat).   (* [ch]: the free dimension it runs in pieces along, if any *)
Arguments Collectives {R}.
Arguments Exchanged {R}.

Definition eplan_problem (m : mesh) (src dst : atype) : result (nat * error) (planned report) :=
  match plan_problem m src dst with
  | Err e => Err e
  | Ok (fs, p, r) =>
      match free_dim src dst with
      | Some ch =>
          (* what the exchange's worst device receives, from the types: the
             schedule always exists and reaches the lower bound
             ([Exchangeproof.exchange_total], [exchange_lower_bound]);
             building it here would take a piece per source block each
             target meets, devices times fan-in *)
          let rx := Traffic.lower_bound m src dst in
          if rx <? Traffic.traffic (received r) then Ok (Exchanged (Some ch) rx) else Ok (Collectives fs p r)
      | None => Ok (Collectives fs p r)
      end
  end.

(** * Uneven types

    The same schedule serves uneven types: pieces are the valid parts of
    blocks, so padding is neither sent nor read. The checker is [ucheck]'s
    counterpart; the exchange's peak is [Uchecker.ubound], the larger
    padded buffer of the two ends, which no plan goes below
    ([Ucheckerproof.ucheck_peak_ge]). The planner also takes the exchange
    where the plan of collectives exceeds that bound (in pieces when a
    free dimension allows, whole otherwise), so that every uneven problem
    gets a plan whose peak is that bound ([Exchangeproof.ueplan_peak]). *)
Definition uecheck (m : mesh) (src dst : atype) (p : list estep) : result (nat * error) ureport :=
  echeck_with (uproblem_error m src dst) (ucheck m src dst)
    (mkureport [src; dst] (upeak_of m [src; dst]) [ulower_bound m src dst]) dst p.

Definition ueplan_problem (m : mesh) (src dst : atype) : result (nat * error) (planned ureport) :=
  match uplan_problem m src dst with
  | Err e => Err e
  | Ok (fs, p, r) =>
      (* from the types, as in [eplan_problem] ([Exchangeproof.uexchange_lower_bound]) *)
      let rx := ulower_bound m src dst in
      let above := ubound m src dst <? upeak r in
      match free_dim src dst with
      | Some ch =>
          if (rx <? Traffic.traffic (ureceived r)) || above
          then Ok (Exchanged (Some ch) rx) else Ok (Collectives fs p r)
      | None => if above then Ok (Exchanged None rx) else Ok (Collectives fs p r)
      end
  end.
