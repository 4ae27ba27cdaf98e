(** The one call the user's plan comes from: refine the mesh into prime
    sub-axes, synthesize there, re-express the plan over the coarsest
    partial refinement that carries it, and validate it there. The
    re-expression is translation-validated: what is returned has passed
    [validate] over its own mesh (computed by [Validate.validator_valid]), and the fully refined plan, which always
    passes ([Searchproof.synthesize_best_prime]), is the fallback. A plan
    is validated once over a refinement: where the plan returned is the
    synthesizer's over the full refinement (always so when no axis splits),
    so is the report, from the synthesizer's validation. The end-to-end
    guarantee is [plan_spec] in [Pipelineproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Validate Synth Search Factor Refine.
Import ListNotations.

(** Sub-axis sizes of an axis of size [n]: its prime factors; [n] itself
    when [n] is 0 or 1 (every axis keeps at least one sub-axis). *)
Definition pfactors (n : nat) : list nat := if n <=? 1 then [n] else factors n.

(** Every axis split into primes. *)
Definition prime_split (m : mesh) : split := map pfactors m.

(** Only the axes in [sp] split into primes. *)
Definition part_split (m : mesh) (sp : list nat) : split :=
  map (fun a => if memb a sp then pfactors (asize m a) else [asize m a]) (seq 0 (length m)).

(** For every sub-axis of [part_split m sp]: its id, the prime sub-axes it
    stands for, and the axis of [m] it belongs to; [ff]: [prime_split m].
    One pass over the axes ([coarse_from]: from axis [a], whose sub-axes
    start at [po] in [part_split m sp] and at [fo] in [ff]). *)
Fixpoint coarse_from (sp : list nat) (ff : split) (a po fo : nat) : list (nat * list nat * nat) :=
  match ff with
  | [] => []
  | fa :: ff' =>
      let n := length fa in
      if memb a sp
      then map (fun k => (po + k, [fo + k], a)) (seq 0 n) ++ coarse_from sp ff' (S a) (po + n) (fo + n)
      else (po, seq fo n, a) :: coarse_from sp ff' (S a) (S po) (fo + n)
  end.

Definition coarse_table (ff : split) (sp : list nat) : list (nat * list nat * nat) := coarse_from sp ff 0 0 0.

(** Read a list of prime sub-axes as sub-axes of the partial refinement;
    [Err (Some a)] when axis [a] must be split further to express it. *)
Fixpoint coarse_axes (tbl : list (nat * list nat * nat)) (fuel : nat) (l : list nat)
  : result (option nat) (list nat) :=
  match l with
  | [] => Ok []
  | j :: _ =>
      match fuel with
      | 0 => Err None
      | S f =>
          match find (fun e => match snd (fst e) with j' :: _ => j' =? j | [] => false end) tbl with
          | None => Err None
          | Some (q, g, a) =>
              let k := length g in
              if nat_list_eqb (take k l) g
              then match coarse_axes tbl f (drop k l) with
                   | Ok r => Ok (q :: r)
                   | Err e => Err e
                   end
              else Err (Some a)
          end
      end
  end.

Definition coarse_ax (tbl : list (nat * list nat * nat)) (l : list nat) := coarse_axes tbl (length l) l.

Fixpoint coarse_dims (tbl : list (nat * list nat * nat)) (t : atype) : result (option nat) atype :=
  match t with
  | [] => Ok []
  | D :: t' =>
      match coarse_ax tbl (axes D), coarse_dims tbl t' with
      | Ok A, Ok u => Ok (mkdim A (gsize D) :: u)
      | Err e, _ | _, Err e => Err e
      end
  end.

Definition coarse_coll (tbl : list (nat * list nat * nat)) (c : coll) : result (option nat) coll :=
  match c with
  | AllGather d xs => match coarse_ax tbl xs with Ok ys => Ok (AllGather d ys) | Err e => Err e end
  | DynSlice d xs => match coarse_ax tbl xs with Ok ys => Ok (DynSlice d ys) | Err e => Err e end
  | AllToAll d e xs => match coarse_ax tbl xs with Ok ys => Ok (AllToAll d e ys) | Err x => Err x end
  | AllPermute t => match coarse_dims tbl t with Ok u => Ok (AllPermute u) | Err e => Err e end
  end.

Fixpoint coarse_plan (tbl : list (nat * list nat * nat)) (p : plan) : result (option nat) plan :=
  match p with
  | [] => Ok []
  | c :: p' =>
      match coarse_coll tbl c, coarse_plan tbl p' with
      | Ok c', Ok q => Ok (c' :: q)
      | Err e, _ | _, Err e => Err e
      end
  end.

(** Split, one axis at a time, only the axes the plan needs split ([ff]: [prime_split m]). *)
Fixpoint coarsen (ff : split) (p : plan) (fuel : nat) (sp : list nat) : option (list nat * plan) :=
  match fuel with
  | 0 => None
  | S f =>
      match coarse_plan (coarse_table ff sp) p with
      | Ok q => Some (sp, q)
      | Err (Some a) => if memb a sp then None else coarsen ff p f (a :: sp)
      | Err None => None
      end
  end.

(** The plan, with the refinement it runs over and the checker's report. *)
(** [plan_problem] once the problem is known valid: its refinements are
    valid too, so their plans are validated without the problem's own
    checks ([Validate.validator_valid]). *)
Definition plan_valid (m : mesh) (src dst : atype) : result (nat * error) (split * plan * report) :=
  let ff := prime_split m in
  let sf := rtype_fast ff src in
  let df := rtype_fast ff dst in
  let vf := validator_valid (rmesh ff) sf df in
  (* the synthesizer's plan with the report its validation gave
     ([Searchproof.synthesize_best_r_spec]) *)
  let best := synthesize_best_r vf (rmesh ff) sf df in
  let pf := match best with Some (p, _) => p | None => naive (rmesh ff) sf df end in
  (* the fully refined plan, where it is returned *)
  let fine := fun _ : unit =>
              match best with
              | Some (p, r) => Ok (ff, p, r)
              | None =>
                  match vf pf with
                  | Some r => Ok (ff, pf, r)
                  | None => Err (0, WrongResult)   (* never: [plan_spec] *)
                  end
              end in
  (* no axis splits (every one is prime): the plan is over the user's mesh already *)
  if forallb (fun fa => match fa with [_] => true | _ => false end) ff then fine tt else
  match coarsen ff pf (S (length m)) [] with
  | Some (sp, p) =>
      let ps := part_split m sp in
      (* over the full refinement, the plan already validated *)
      if list_eqb ps ff && plan_eqb p pf then fine tt else
      match validator_valid (rmesh ps) (rtype_fast ps src) (rtype_fast ps dst) p with
      | Some r => Ok (ps, p, r)
      | None => fine tt
      end
  | None => fine tt
  end.

Definition plan_problem (m : mesh) (src dst : atype) : result (nat * error) (split * plan * report) :=
  match problem_error m src dst with
  | Some e => Err (0, e)
  | None => plan_valid m src dst
  end.
