(** The one planning call for partial types: reduce what the target does
    not keep pending, by reduce-scatters onto the dimensions the target
    shards with the reduced axes wherever they divide and by all-reduces
    otherwise (placed where the array is smaller); plan the rest with
    [Pipeline.plan_problem]; make pending what the target adds. The result
    is translation-validated by [Pchecker.pvalidate] over the refinement
    it runs on; the fallback (all-reduce everything, plan, make pending) is
    proved to validate. With nothing pending this is [plan_problem]'s plan
    and report, returned as they are (the validation they passed is the
    partial one too: [Ppipelineproof.plain_validated]).
    The guarantees are [Ppipelineproof.pplan_spec] and [pplan_plain]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Refine Pipeline Partial Pchecker.
Import ListNotations.

(** * Over a refinement *)

Definition raxes (fs : split) (xs : list nat) : list nat := flat_map (grp fs) xs.

Definition rptype (fs : split) (pt : ptype) : ptype := mkptype (raxes fs (paxes pt)) (rtype fs (ptyp pt)).

(** The pipeline's own steps, named over the user's mesh, over the refinement. *)
Definition rpcoll (fs : split) (op : pcoll) : pcoll :=
  match op with
  | ReduceScatter d xs => ReduceScatter d (raxes fs xs)
  | AllReduce xs => AllReduce (raxes fs xs)
  | ToPartial xs => ToPartial (raxes fs xs)
  | PColl c => PColl c
  end.

(** No step for no axes. *)
Definition reduce_all (xs : list nat) : pplan := match xs with [] => [] | _ => [AllReduce xs] end.
Definition make_pending (xs : list nat) : pplan := match xs with [] => [] | _ => [ToPartial xs] end.

(** * Reduce-scatters *)

(** The dimension of [t] that axis [a] shards. *)
Fixpoint dim_of (a : nat) (t : atype) : option nat :=
  match t with
  | [] => None
  | D :: t' => if memb a (axes D) then Some 0 else option_map S (dim_of a t')
  end.

(** Axis [a] divides the local size of dimension [d] of [u]. *)
Definition divides_at (m : mesh) (a : nat) (u : atype) (d : nat) : bool :=
  match nth_error u d with
  | Some D => lsize m D mod asize m a =? 0
  | None => false
  end.

(** For each axis of [R] that the target [t] shards, in turn: reduce-scatter
    it onto the dimension [t] shards with it where it divides the local size
    of that dimension of [u], else onto the first dimension where it does
    (the rest of the plan moves it: less than an all-reduce receives); the
    axes left over, and the type reached. *)
Fixpoint scatter (m : mesh) (t : atype) (R : list nat) (u : atype) : list pcoll * list nat * atype :=
  match R with
  | [] => ([], [], u)
  | a :: R' =>
      let skip := fun _ : unit => match scatter m t R' u with (ops, rest, u') => (ops, a :: rest, u') end in
      match dim_of a t with
      | None => skip tt
      | Some d =>
          match find (divides_at m a u) (d :: seq 0 (length u)) with
          | None => skip tt
          | Some e =>
              let D := nth e u (mkdim [] 1) in
              match scatter m t R' (set_nth u e (mkdim (axes D ++ [a]) (gsize D))) with
              | (ops, rest, u') => (ReduceScatter e [a] :: ops, rest, u')
              end
          end
      end
  end.

(** * The pipeline *)

(** All-reduce every pending axis, plan the plain problem, make the
    target's axes pending. *)
Definition pfallback (m : mesh) (src dst : ptype) : result (nat * error) (split * pplan * preport) :=
  match plan_problem m (ptyp src) (ptyp dst) with
  | Err e => Err e
  | Ok (fs, p, _) =>
      let pp := reduce_all (raxes fs (paxes src)) ++ map PColl p ++ make_pending (raxes fs (paxes dst)) in
      match pvalidate (rmesh fs) (rptype fs src) (rptype fs dst) pp with
      | Some r => Ok (fs, pp, r)
      | None => Err (0, WrongResult)   (* never: [Ppipelineproof.pfallback_ok] *)
      end
  end.

(** Something pending: reduce-scatter and all-reduce what the target does
    not keep, plan the rest, make pending what the target adds; validated. *)
Definition pplan_pending (m : mesh) (src dst : ptype) : result (nat * error) (split * pplan * preport) :=
  let P := paxes src in
  let Q := paxes dst in
  let t := ptyp dst in
  match scatter m t (remove_axes Q P) (ptyp src) with
  | (scat, rest, u) =>
      match plan_problem m u t with
      | Err _ => pfallback m src dst
      | Ok (fs, p, _) =>
          (* An axis left to all-reduce waits for the smaller end of the
             plan, unless the target shards with it. *)
          let late := negb (existsb (fun a => memb a (used t)) rest) && (size m t <? size m u) in
          let red := reduce_all (raxes fs rest) in
          let body := if late then map PColl p ++ red else red ++ map PColl p in
          let pp := map (rpcoll fs) scat ++ body ++ make_pending (raxes fs (remove_axes P Q)) in
          match pvalidate (rmesh fs) (rptype fs src) (rptype fs dst) pp with
          | Some r => Ok (fs, pp, r)
          | None => pfallback m src dst
          end
      end
  end.

(** [plan_problem]'s report as a partial one, nothing pending. *)
Definition plain_report (r : report) : preport :=
  mkpreport (map (mkptype []) (types r)) (peak r) (received r).

Definition pplan_problem (m : mesh) (src dst : ptype) : result (nat * error) (split * pplan * preport) :=
  match pproblem_error m src dst with
  | Some e => Err (0, e)
  | None =>
      match paxes src, paxes dst with
      | [], [] =>
          (* nothing pending: [plan_problem]'s plan and report as they are
             (its problem is valid: [plan_valid]) *)
          match plan_valid m (ptyp src) (ptyp dst) with
          | Err e => Err e
          | Ok (fs, p, r) => Ok (fs, map PColl p, plain_report r)
          end
      | _, _ => pplan_pending m src dst
      end
  end.
