(** A plan with its traffic certified least within the memory bound, in one
    call ([plan(..., minimal=True)]): the candidate plan (an untrusted
    search's, over the prime sub-axes of size 2 or more, or else the
    pipeline's own) is carried to a refinement of the user's mesh here,
    checked there by the checker, its peak compared with the bound, and the
    certificate checked ([Certify.certify_split]) at exactly the traffic the
    checker reports for it. The guarantee is [Minimalproof.mplan_spec]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Traffic Validate Factor Refine Certify Pipeline.
Import ListNotations.

(** Every axis split into its prime factors, an axis of size 1 into none
    (the split certificates are checked over: no sub-axis of size 1). *)
Definition prime_parts (m : mesh) : split := map (fun n => if n <=? 1 then [] else factors n) m.

(** The sub-axes of [prime_parts m] as sub-axes of [prime_split m] (which
    keeps an axis of size 1 as one sub-axis): the sub-axes of size 2 or
    more of [prime_split m], in order. *)
Definition lift_index (m : mesh) : list nat :=
  let fm := rmesh (prime_split m) in
  filter (fun k => 2 <=? nth k fm 1) (seq 0 (length fm)).

Definition lift_axes (ix xs : list nat) : list nat := map (fun q => nth q ix 0) xs.

Definition lift_type (ix : list nat) (t : atype) : atype :=
  map (fun D => mkdim (lift_axes ix (axes D)) (gsize D)) t.

Definition lift_coll (ix : list nat) (c : coll) : coll :=
  match c with
  | AllGather d xs => AllGather d (lift_axes ix xs)
  | DynSlice d xs => DynSlice d (lift_axes ix xs)
  | AllToAll d e xs => AllToAll d e (lift_axes ix xs)
  | AllPermute t => AllPermute (lift_type ix t)
  end.

(** A plan over [prime_parts m] as one over [prime_split m]: the same steps
    on the same sub-axes, and where the refined source or target uses
    sub-axes of size 1 (which [prime_parts m] has not), a permute first or
    last that drops or restores them. Nothing depends on this being right:
    the checker decides. *)
Definition lift_plan (m : mesh) (src dst : atype) (p : plan) : plan :=
  let ff := prime_split m in
  let gs := prime_parts m in
  let ix := lift_index m in
  let start := lift_type ix (rtype_fast gs src) in
  let fin := lift_type ix (rtype_fast gs dst) in
  (if atype_eqb start (rtype_fast ff src) then [] else [AllPermute start])
  ++ map (lift_coll ix) p
  ++ (if atype_eqb fin (rtype_fast ff dst) then [] else [AllPermute (rtype_fast ff dst)]).

(** Why a candidate is refused: the checker's reason (step, error); a type
    along it above the bound (the peak); or the certificate does not prove
    its traffic least within the bound (the traffic). *)
Inductive mfail :=
| MRefused (i : nat) (e : error)
| MAboveCap (peak : nat)
| MNotLeast (traffic : nat).

(** The candidate [cand] (over [prime_parts m]; [None]: the pipeline's plan,
    [Pipeline.plan_problem]) over its split [fs] of [m], accepted by the
    checker with report [r] whose peak is within [bound m src dst], and the
    certificate [cert] (over [prime_parts m]) accepted at the figure
    [traffic (received r)]. The same certificate holds over the plan's own
    mesh, split into its prime parts, where that split gives the same
    sub-axes and types (checked here; always so). *)
Definition mplan_problem (m : mesh) (src dst : atype) (cand : option plan) (cert : list (atype * nat))
    : result mfail (split * plan * report) :=
  match problem_error m src dst with
  | Some e => Err (MRefused 0 e)
  | None =>
      let planned :=
        match cand with
        | Some p => Ok (prime_split m, lift_plan m src dst p)
        | None => match plan_problem m src dst with
                  | Ok (fs, p, _) => Ok (fs, p)
                  | Err (i, e) => Err (MRefused i e)
                  end
        end in
      match planned with
      | Err x => Err x
      | Ok (fs, p) =>
          let fsrc := rtype_fast fs src in
          let fdst := rtype_fast fs dst in
          match check (rmesh fs) fsrc fdst p with
          | Err (i, e) => Err (MRefused i e)
          | Ok r =>
              let cap := bound m src dst in
              let T := traffic (received r) in
              let gs := prime_parts m in
              let hs := prime_parts (rmesh fs) in
              if negb (peak r <=? cap) then Err (MAboveCap (peak r)) else
              if nat_list_eqb (map prod fs) m && nat_list_eqb (map prod hs) (rmesh fs)
                 && nat_list_eqb (rmesh hs) (rmesh gs)
                 && atype_eqb (rtype_fast hs fsrc) (rtype_fast gs src)
                 && atype_eqb (rtype_fast hs fdst) (rtype_fast gs dst)
                 && certify_split m gs src dst cap T cert
              then Ok (fs, p, r) else Err (MNotLeast T)
          end
      end
  end.
