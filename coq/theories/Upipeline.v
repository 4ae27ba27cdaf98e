(** The one planning call for uneven types. The even synthesizer plans a
    surrogate problem (every global size rounded up to a multiple of the
    number of devices, so every type is even; on an even problem, the
    problem itself), the plan is read back over the real sizes (only a
    permute carries a type: its global sizes become the real ones) and
    translation-validated by the uneven checker [Uchecker.ucheck] over the
    refinement it runs on. When that fails the fallback (gather every
    sharded dimension whole, then slice every dimension into the target's
    axes) is used; it always validates ([Upipelineproof.ufallback_ok]).
    Guarantees: [Upipelineproof.uplan_spec] (accepted, data correct for
    every global array and every padding value) and [uplan_even] (on even
    problems, [Pipeline.plan_problem]'s split and plan). No memory bound is
    claimed: the report's peak is what the plan allocates. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Refine Pipeline Uneven Uchecker.
Import ListNotations.

(** * The surrogate even problem *)

Definition round_up (g n : nat) : nat := csize g n * n.

Definition surrogate (m : mesh) (t : atype) : atype :=
  map (fun D => mkdim (axes D) (round_up (gsize D) (ndevices m))) t.

(** A type with its global sizes replaced by [gs]. *)
Definition with_sizes (gs : list nat) (t : atype) : atype :=
  map (fun Dg => mkdim (axes (fst Dg)) (snd Dg)) (combine t gs).

Definition real_coll (gs : list nat) (c : coll) : coll :=
  match c with
  | AllPermute t => AllPermute (with_sizes gs t)
  | _ => c
  end.

Definition real_plan (gs : list nat) (p : plan) : plan := map (real_coll gs) p.

Definition is_even (m : mesh) (src dst : atype) : bool := wfb m src && wfb m dst.

(** * The fallback *)

(** Gather every sharded dimension whole, from dimension [k] on. *)
Fixpoint gathers (t : atype) (k : nat) : plan :=
  match t with
  | [] => []
  | D :: t' => match axes D with
               | [] => gathers t' (S k)
               | xs => AllGather k xs :: gathers t' (S k)
               end
  end.

(** Slice every dimension into the axes of [t], from dimension [k] on. *)
Fixpoint slices (t : atype) (k : nat) : plan :=
  match t with
  | [] => []
  | D :: t' => match axes D with
               | [] => slices t' (S k)
               | xs => DynSlice k xs :: slices t' (S k)
               end
  end.

Definition ufallback_plan (src dst : atype) : plan := gathers src 0 ++ slices dst 0.

Definition ufallback (m : mesh) (src dst : atype) : result (nat * error) (split * plan * ureport) :=
  let fs := prime_split m in
  let p := ufallback_plan (rtype fs src) (rtype fs dst) in
  match ucheck (rmesh fs) (rtype fs src) (rtype fs dst) p with
  | Ok r => Ok (fs, p, r)
  | Err _ => Err (0, WrongResult)   (* never: [Upipelineproof.ufallback_ok] *)
  end.

(** * A search over the uneven rules *)

(** The steps the search tries from [t]: every gather of a suffix of a
    dimension's axes, every slice of one free axis, every all-to-all of a
    suffix, a permute to the target, and the permutes rotating the axes of
    one dimension. (On every pair of types of [{x:2,y:2,z:2}] and
    [{x:2,y:3}] of the shapes in [tests/test_uneven.py] the pipeline's peak
    is the least of any plan of the rules; measured, not proved.) *)
Definition ucands (m : mesh) (t dst : atype) : list coll :=
  let dims := seq 0 (length t) in
  let sufs := fun d => let A := axes (nth d t dflt) in map (fun k => skipn k A) (seq 0 (length A)) in
  let free := filter (fun a => negb (memb a (used t))) (seq 0 (length m)) in
  flat_map (fun d => map (AllGather d) (sufs d)) dims
  ++ flat_map (fun d => map (fun a => DynSlice d [a]) free) dims
  ++ flat_map (fun d => flat_map (fun e => if d =? e then [] else map (AllToAll d e) (sufs d)) dims) dims
  ++ AllPermute dst
  :: flat_map (fun d => let D := nth d t dflt in
                        map (fun k => AllPermute (set_nth t d (mkdim (skipn k (axes D) ++ firstn k (axes D)) (gsize D))))
                            (seq 1 (length (axes D) - 1))) dims.

(** A frontier entry: the peak so far, the elements received so far (per
    device, [Uchecker.urecv] summed), the type reached, the plan (reversed). *)
Definition entry : Type := (nat * nat * atype * plan)%type.

(** Lexicographic on (peak, received): both never decrease along a plan, so
    the first plan to reach a type is the least on this order. On a tie the
    newer entry goes first. *)
Definition entry_le (x y : entry) : bool :=
  let '(c1, r1, _, _) := x in
  let '(c2, r2, _, _) := y in
  (c1 <? c2) || ((c1 =? c2) && (r1 <=? r2)).

Fixpoint uinsert (x : entry) (l : list entry) : list entry :=
  match l with
  | [] => [x]
  | y :: l' => if entry_le x y then x :: l else y :: uinsert x l'
  end.

(** Best-first search on the peak (the largest padded buffer so far, which
    never decreases along a plan), then on the elements received: the first
    time the target is taken from the frontier its plan has the least peak
    among the plans of these steps, and among those the least traffic; at
    most [fuel] types are expanded. The plan (kept reversed) is only a
    candidate: the pipeline validates it with [ucheck]. *)
Fixpoint usearch (m : mesh) (dst : atype) (fuel : nat) (frontier : list entry) (seen : list atype)
  : option plan :=
  match fuel with
  | 0 => None
  | S f =>
      match frontier with
      | [] => None
      | (c, r, t, rp) :: rest =>
          if atype_eqb t dst then Some (rev rp) else
          if existsb (atype_eqb t) seen then usearch m dst f rest seen else
          let nexts := flat_map (fun op => match uapply m t op with
                                           | Ok t1 => if existsb (atype_eqb t1) seen then []
                                                      else [(Nat.max c (usize_padded m t1), r + urecv m t op t1,
                                                             t1, op :: rp)]
                                           | Err _ => []
                                           end) (ucands m t dst) in
          usearch m dst f (fold_right uinsert rest nexts) (t :: seen)
      end
  end.

Definition ufuel : nat := 300.

(** * The pipeline *)

(** A candidate plan over a split, kept when the uneven checker accepts it. *)
Definition ucandidate (src dst : atype) (fs : split) (p : plan) : option (split * plan * ureport) :=
  match ucheck (rmesh fs) (rtype fs src) (rtype fs dst) p with
  | Ok r => Some (fs, p, r)
  | Err _ => None
  end.

(** The candidate with the smaller peak (the first on a tie). *)
Definition upick (a b : option (split * plan * ureport)) : option (split * plan * ureport) :=
  match a, b with
  | Some x, Some y => if upeak (snd y) <? upeak (snd x) then b else a
  | None, _ => b
  | _, None => a
  end.

(** Uneven problems: the surrogate's plan read back; when it is not
    accepted or peaks above [ubound] (which no plan beats: the source and
    the target are on every plan), also the search's plan over the prime
    refinement; the accepted one with the smaller peak, else the fallback. *)
Definition uneven_plan (m : mesh) (src dst : atype) : result (nat * error) (split * plan * ureport) :=
  let sur := match plan_problem m (surrogate m src) (surrogate m dst) with
             | Ok (fs, p, _) => ucandidate src dst fs (real_plan (map gsize src) p)
             | Err _ => None
             end in
  let good := match sur with Some x => upeak (snd x) <=? ubound m src dst | None => false end in
  let ff := prime_split m in
  let srch := if good then None else
              let s := rtype ff src in
              match usearch (rmesh ff) (rtype ff dst) ufuel [(usize_padded (rmesh ff) s, 0, s, [])] [] with
              | Some p => ucandidate src dst ff p
              | None => None
              end in
  match upick sur srch with
  | Some x => Ok x
  | None => ufallback m src dst
  end.

Definition uplan_problem (m : mesh) (src dst : atype) : result (nat * error) (split * plan * ureport) :=
  match uproblem_error m src dst with
  | Some e => Err (0, e)
  | None =>
      if is_even m src dst then
        match plan_problem m src dst with
        | Ok (fs, p, _) =>
            match ucheck (rmesh fs) (rtype fs src) (rtype fs dst) p with
            | Ok r => Ok (fs, p, r)
            | Err _ => ufallback m src dst
            end
        | Err _ => ufallback m src dst
        end
      else uneven_plan m src dst
  end.
