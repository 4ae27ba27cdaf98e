(** A checker of plans between partial types over uneven dimensions, any
    plan of their shape, not only the planner's: the source's pending axes
    reduced first (an all-reduce of all of them, or a reduce-scatter of all
    of them onto a dimension the uneven slice rule accepts), then any plan
    the uneven checker with exchanges accepts between the array types
    ([Exchange.uecheck]: collectives, or one exchange), then the target's
    pending axes made pending. Reductions over part of the pending axes, or
    collectives while something is pending, are refused.

    Its report lists the partial types along the plan, what each step
    receives (the reduction as [Puexchange.pu_received] counts it, the rest
    as the uneven checker's) and the peak (the largest padded buffer).
    [Puexchange.puplan_problem]'s plan goes through it ([puplan_checked]).
    Definitions only; proofs in [Pucheckerproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Uneven Uchecker Monoid Partial Crossmesh Exchange Puexchange.
Import ListNotations.

Inductive pustep :=
| PUColl (c : coll)                      (* a collective, nothing pending *)
| PUExch (t : atype)                     (* the exchange to [t] *)
| PUReduce (xs : list nat)               (* all-reduce the pending axes [xs] *)
| PUScatterTo (d : nat) (xs : list nat)  (* reduce-scatter them onto dimension [d] *)
| PUPending (xs : list nat).             (* make [xs] pending *)

Record pureport := mkpureport { putypes : list ptype; pupeak : nat; pureceived : list nat }.

(** Why a plan is refused: the problem; the first step, which must reduce
    exactly the source's pending axes (in their order); the last, which must
    make exactly the target's pending; a reduction or make-pending
    elsewhere; or the uneven checker's reason on the middle steps (step
    numbered within them). *)
Inductive puerror :=
| PUBadProblem
| PUBadReduction
| PUBadPending
| PUMisplaced
| PUMid (i : nat) (e : error).

(** The reduction at the head of [p]: how, and the steps after it. *)
Definition pu_reduction (m : mesh) (src : ptype) (p : list pustep) : option (pustart * list pustep) :=
  match paxes src with
  | [] => Some (PUAllReduce, p)
  | P =>
      match p with
      | PUReduce xs :: rest => if nat_list_eqb xs P then Some (PUAllReduce, rest) else None
      | PUScatterTo d xs :: rest =>
          if nat_list_eqb xs P
          then match uapply m (ptyp src) (DynSlice d P) with
               | Ok t1 => Some (PUScatter d t1, rest)
               | Err _ => None
               end
          else None
      | _ => None
      end
  end.

(** The steps before the make-pending at the end of [p]. *)
Definition pu_before_pending (dst : ptype) (p : list pustep) : option (list pustep) :=
  match paxes dst with
  | [] => Some p
  | Q =>
      match rev p with
      | PUPending xs :: r => if nat_list_eqb xs Q then Some (rev r) else None
      | _ => None
      end
  end.

(** The middle steps as steps of the uneven checker with exchanges. *)
Fixpoint pu_esteps (p : list pustep) : option (list estep) :=
  match p with
  | [] => Some []
  | PUColl c :: p' => match pu_esteps p' with Some q => Some (Coll c :: q) | None => None end
  | PUExch t :: p' => match pu_esteps p' with Some q => Some (Exch t :: q) | None => None end
  | _ => None
  end.

(** What the reduction receives ([Puexchange.pu_received]'s and
    [pu_rs_received]'s figures), and the type it leaves. *)
Definition pu_red_received (m : mesh) (src : ptype) (st : pustart) : list nat :=
  match st with
  | PUAllReduce =>
      let s := usize_padded m (ptyp src) in
      match paxes src with [] => [] | P => [2 * (s - s / nprod m P)] end
  | PUScatter _ t1 => [(nprod m (paxes src) - 1) * usize_padded m t1]
  end.

Definition pu_red_types (src : ptype) (st : pustart) : list ptype :=
  match paxes src with [] => [] | _ => [mkptype [] (pu_mid src st)] end.

Definition pucheck (m : mesh) (src dst : ptype) (p : list pustep) : result puerror pureport :=
  if negb (puvalidb m src dst) then Err PUBadProblem else
  match pu_reduction m src p with
  | None => Err PUBadReduction
  | Some (st, rest) =>
      match pu_before_pending dst rest with
      | None => Err PUBadPending
      | Some mid =>
          match pu_esteps mid with
          | None => Err PUMisplaced
          | Some es =>
              match uecheck m (pu_mid src st) (ptyp dst) es with
              | Err (i, e) => Err (PUMid i e)
              | Ok r =>
                  let pend := match paxes dst with [] => false | _ => true end in
                  Ok (mkpureport
                        (src :: pu_red_types src st ++ map (mkptype []) (tl (utypes r))
                             ++ (if pend then [dst] else []))
                        (Nat.max (usize_padded m (ptyp src)) (upeak r))
                        (pu_red_received m src st ++ ureceived r ++ (if pend then [0] else [])))
              end
          end
      end
  end.

(** * Data semantics, on padded buffers *)

(** The middle steps: the collectives by [Uchecker.uexec], the exchange by
    [Puexchange.pu_exchanged]. *)
Definition pu_mid_exec (M : cmonoid) (m : mesh) (t0 t' : atype) (es : list estep)
    (y : coords -> list nat -> carrier M) : coords -> list nat -> carrier M :=
  match colls es with
  | Some cs => uexec (munit M) m t0 cs y
  | None =>
      match exchange m t0 t' with
      | Some pss => pu_exchanged M m t0 t' pss y
      | None => y
      end
  end.

Definition puexec_plan (M : cmonoid) (m : mesh) (src dst : ptype) (p : list pustep)
    (x : coords -> list nat -> carrier M) : coords -> list nat -> carrier M :=
  match pu_reduction m src p with
  | None => x
  | Some (st, rest) =>
      match pu_before_pending dst rest with
      | None => x
      | Some mid =>
          match pu_esteps mid with
          | None => x
          | Some es => pu_make_pending M m dst (pu_mid_exec M m (pu_mid src st) (ptyp dst) es (pu_reduced M m src st x))
          end
      end
  end.

(** [Puexchange.puplan_problem]'s plan as steps ([puplan_start]: its choice of
    reduction, without its schedules), through the checker. *)
Definition puplan_steps (src dst : ptype) (st : pustart) : list pustep :=
  match st with
  | PUAllReduce => match paxes src with [] => [] | P => [PUReduce P] end
  | PUScatter d _ => [PUScatterTo d (paxes src)]
  end
  ++ [PUExch (ptyp dst)] ++ match paxes dst with [] => [] | Q => [PUPending Q] end.

Definition puplan_checked (m : mesh) (src dst : ptype) : result puerror (list pustep * pureport) :=
  match puplan_start m src dst with
  | None => Err PUBadProblem
  | Some st =>
      let p := puplan_steps src dst st in
      match pucheck m src dst p with
      | Ok r => Ok (p, r)
      | Err e => Err e
      end
  end.
