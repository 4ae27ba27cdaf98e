(** The redistribution synthesizer.

    [synthesize m src dst] builds candidate plans in normal form (all
    [DynSlice]s, then [AllToAll]s and [AllPermute]s, then [AllGather]s),
    validates each with the checker (well typed, peak at most
    [max (size src) (size dst)], normal form, slices add only axes [dst]
    uses, gathers remove only axes [dst] does not use), and returns the
    validated candidate with the least traffic (then the fewest types that
    split a whole axis, then the fewest communicating collectives), flagged
    [true]; if no candidate validates, it returns the naive plan flagged
    [false].

    Candidates work over the flat (refined) mesh, counting axes by size
    ("classes"): for a prime-size mesh, the count of size-[p] axes of a
    dimension is the exponent of [p] in its group size (spec: "A
    construction that meets the bound"). The canonical candidate follows the
    spec's construction one axis at a time and always validates on a mesh of
    prime (or unit) axis sizes ([synthesize_guaranteed_prime]); the greedy
    candidates move several axes per [AllToAll], avoid permutes, and slice
    more where that saves moves.

    Theorems: [synthesize_correct] (total), [synthesize_memory],
    [synthesize_normal_form], [synthesize_gather_traffic] (with the general
    [gathers_traffic]), [normal_form_peak], [synthesize_guaranteed] (under
    [cap_ok]), [synthesize_guaranteed_pow2], [synthesize_guaranteed_prime]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker.
Import ListNotations.

(** Gather every axis of every dimension, then slice the target's axes. *)
Definition naive (m : mesh) (src dst : atype) : plan :=
  flat_map (fun dD => match axes (snd dD) with [] => [] | xs => [AllGather (fst dD) xs] end)
           (combine (seq 0 (length src)) src) ++
  flat_map (fun dD => match axes (snd dD) with [] => [] | xs => [DynSlice (fst dD) xs] end)
           (combine (seq 0 (length dst)) dst).

(** * Helpers *)

(** Number of axes of size [v] in [l]. *)
Fixpoint cnt (m : mesh) (v : nat) (l : list nat) : nat :=
  match l with
  | [] => 0
  | a :: l' => if asize m a =? v then S (cnt m v l') else cnt m v l'
  end.

(** Dimension [d] of a type: its axes and global size. Types under
    construction are functions from dimensions to axis lists. *)
Definition dd0 : dim := mkdim [] 1.
Definition sax (t : atype) (d : nat) : list nat := axes (nth d t dd0).
Definition gs (t : atype) (d : nat) : nat := gsize (nth d t dd0).

(** The type with the global sizes of [t] and the axes [f d]. *)
Definition tyof (t : atype) (f : nat -> list nat) : atype :=
  map (fun d => mkdim (f d) (gs t d)) (seq 0 (length t)).

(** Every axis of the first [r] dimensions. *)
Definition allax (r : nat) (f : nat -> list nat) : list nat := flat_map f (seq 0 r).

Fixpoint first_some {A B} (f : A -> option B) (l : list A) : option B :=
  match l with
  | [] => None
  | x :: l' => match f x with Some y => Some y | None => first_some f l' end
  end.

Fixpoint index_of (a : nat) (l : list nat) : nat :=
  match l with
  | [] => 0
  | b :: l' => if a =? b then 0 else S (index_of a l')
  end.

(** Stable insertion sort by a key. *)
Fixpoint insert_by (k : nat -> nat) (x : nat) (l : list nat) : list nat :=
  match l with
  | [] => [x]
  | y :: l' => if k x <? k y then x :: l else y :: insert_by k x l'
  end.

Definition sort_by (k : nat -> nat) (l : list nat) : list nat :=
  fold_left (fun acc x => insert_by k x acc) l [].

(** One multi-axis slice, resp. gather, per dimension that has axes to add, resp. remove. *)
Definition slices_of (r : nat) (X : nat -> list nat) : plan :=
  flat_map (fun d => match X d with [] => [] | xs => [DynSlice d xs] end) (seq 0 r).

Definition gathers_of (r : nat) (E : nat -> list nat) : plan :=
  flat_map (fun d => match E d with [] => [] | xs => [AllGather d xs] end) (seq 0 r).

(** Pairs [(d, a)]: first [a] from [F d] for every [d], then [a] from [l] for every [d]. *)
Definition pairs (r : nat) (F : nat -> list nat) (l : list nat) : list (nat * nat) :=
  flat_map (fun d => map (pair d) (F d)) (seq 0 r) ++ flat_map (fun d => map (pair d) l) (seq 0 r).

(** Append [a] to dimension [d] when [ok X d a] says so. *)
Definition grow (ok : (nat -> list nat) -> nat -> nat -> bool) (X : nat -> list nat) (p : nat * nat)
    : nat -> list nat :=
  if ok X (fst p) (snd p) then upd X (fst p) (X (fst p) ++ [snd p]) else X.

(** * Slices: which replicated target axes to slice into which dimension

    Pass 1 offers every target axis to the dimension where the target wants
    it, pass 2 to every dimension. An axis [a] of size [v] is sliced into [d]
    when it is replicated in the source and not yet sliced, and [d] holds
    fewer size-[v] axes than the target's [d] (so the count stays at most the
    larger of the source's and the target's counts); with [budget], only
    while the sliced and source size-[v] axes number fewer than the
    target's. *)
Definition slice_ok (m : mesh) (r : nat) (S D : nat -> list nat) (budget : bool)
    (X : nat -> list nat) (d a : nat) : bool :=
  let v := asize m a in
  negb (memb a (allax r S)) && negb (memb a (allax r X)) &&
  (cnt m v (S d ++ X d) <? cnt m v (D d)) &&
  (negb budget || (cnt m v (allax r S) + cnt m v (allax r X) <? cnt m v (allax r D))).

Definition slice_step (m : mesh) (r : nat) (S D : nat -> list nat) (budget : bool) :=
  grow (slice_ok m r S D budget).

Definition slicer (m : mesh) (r : nat) (S D : nat -> list nat) (budget : bool) : nat -> list nat :=
  fold_left (slice_step m r S D budget) (pairs r D (allax r D)) (fun _ => []).

(** A variant that also slices a target axis into its own dimension beyond
    the counts, as long as the global size allows: more slicing, fewer moves,
    and whole axes kept together. *)
Definition slicer_div (m : mesh) (r : nat) (S D : nat -> list nat) (g : nat -> nat) : nat -> list nat :=
  fold_left (grow (fun X d a =>
    slice_ok m r S D false X d a ||
    (negb (memb a (allax r S)) && negb (memb a (allax r X)) && memb a (D d) &&
     (g d mod nprod m (S d ++ X d ++ [a]) =? 0))))
    (pairs r D (allax r D)) (fun _ => []).

(** * Extras: the axes to gather, given the axes [A] held before the gathers

    Dimension [d] of the pre-gather type is [D d ++ E d]; [E d] holds, for
    every size [v], as many axes the target does not use as [A d] has
    size-[v] axes beyond the target's count (in all, as many as [A] has
    beyond the target). Axes already in [A d] come first (pass 1), then any
    such axis (pass 2). *)
Definition extra_ok (m : mesh) (r : nat) (D A E : nat -> list nat) (d a : nat) : bool :=
  let v := asize m a in
  negb (memb a (allax r D)) && negb (memb a (allax r E)) &&
  (cnt m v (D d ++ E d) <? cnt m v (A d)) &&
  (cnt m v (allax r D) + cnt m v (allax r E) <? cnt m v (allax r A)).

Definition extra_step (m : mesh) (r : nat) (D A : nat -> list nat) := grow (extra_ok m r D A).

Definition extras (m : mesh) (r : nat) (D A : nat -> list nat) : nat -> list nat :=
  fold_left (extra_step m r D A) (pairs r A (seq 0 (length m))) (fun _ => []).

(** * The same folds, faster

    [slicer_f] and [extras_f] compute [slicer] and [extras]
    ([slicer_f_eq], [extras_f_eq]) while carrying the axes added so far
    and computing the fixed axis lists once, instead of rebuilding every
    [allax] at every pair. *)
Definition grow_f (ok : (nat -> list nat) -> list nat -> nat -> nat -> bool)
    (st : (nat -> list nat) * list nat) (p : nat * nat) : (nat -> list nat) * list nat :=
  if ok (fst st) (snd st) (fst p) (snd p)
  then (upd (fst st) (fst p) (fst st (fst p) ++ [snd p]), snd p :: snd st) else st.

Definition slice_ok_f (m : mesh) (AS AD : list nat) (S D : nat -> list nat) (budget : bool)
    (X : nat -> list nat) (AX : list nat) (d a : nat) : bool :=
  let v := asize m a in
  negb (memb a AS) && negb (memb a AX) &&
  (cnt m v (S d ++ X d) <? cnt m v (D d)) &&
  (negb budget || (cnt m v AS + cnt m v AX <? cnt m v AD)).

Definition slicer_f (m : mesh) (r : nat) (S D : nat -> list nat) (budget : bool) : nat -> list nat :=
  let AD := allax r D in
  fst (fold_left (grow_f (slice_ok_f m (allax r S) AD S D budget)) (pairs r D AD) (fun _ => [], [])).

Definition slicer_div_f (m : mesh) (r : nat) (S D : nat -> list nat) (g : nat -> nat) : nat -> list nat :=
  let AS := allax r S in
  let AD := allax r D in
  fst (fold_left (grow_f (fun X AX d a =>
    slice_ok_f m AS AD S D false X AX d a ||
    (negb (memb a AS) && negb (memb a AX) && memb a (D d) &&
     (g d mod nprod m (S d ++ X d ++ [a]) =? 0))))
    (pairs r D AD) (fun _ => [], [])).

Definition extra_ok_f (m : mesh) (AD AA : list nat) (D A : nat -> list nat)
    (E : nat -> list nat) (AE : list nat) (d a : nat) : bool :=
  let v := asize m a in
  negb (memb a AD) && negb (memb a AE) &&
  (cnt m v (D d ++ E d) <? cnt m v (A d)) &&
  (cnt m v AD + cnt m v AE <? cnt m v AA).

Definition extras_f (m : mesh) (r : nat) (D A : nat -> list nat) : nat -> list nat :=
  fst (fold_left (grow_f (extra_ok_f m (allax r D) (allax r A) D A))
                 (pairs r A (seq 0 (length m))) (fun _ => [], [])).

(** The end of every plan: a permute to the pre-gather type [T] unless
    already there, then one gather per dimension. *)
Definition finish (src : atype) (C T E : nat -> list nat) : plan :=
  (if atype_eqb (tyof src C) (tyof src T) then [] else [AllPermute (tyof src T)]) ++
  gathers_of (length src) E.

(** * The canonical construction (the spec's route)

    Slice, fix the pre-gather type [T], then move one axis at a time from a
    dimension holding more size-[v] axes than [T] to one holding fewer, with
    an [AllToAll] (preceded by a permute bringing the axis to the minor end
    when it is not there), then permute to [T] and gather. *)
Definition receiver_for (m : mesh) (r : nat) (C T : nat -> list nat) (d v : nat) : option nat :=
  find (fun e => negb (e =? d) && (cnt m v (C e) <? cnt m v (T e))) (seq 0 r).

Definition find_move (m : mesh) (r : nat) (C T : nat -> list nat) : option (nat * nat * nat) :=
  first_some (fun d =>
    first_some (fun a =>
      let v := asize m a in
      if cnt m v (T d) <? cnt m v (C d)
      then option_map (fun e => (d, e, a)) (receiver_for m r C T d v) else None)
      (rev (C d)))
    (seq 0 r).

Fixpoint move_loop (m : mesh) (src : atype) (T : nat -> list nat) (fuel : nat)
    (C : nat -> list nat) : plan * (nat -> list nat) :=
  match fuel with
  | 0 => ([], C)
  | S f =>
      match find_move m (length src) C T with
      | None => ([], C)
      | Some (d, e, a) =>
          let Cd' := remove Nat.eq_dec a (C d) in
          let pre := if nat_list_eqb (C d) (Cd' ++ [a]) then []
                     else [AllPermute (tyof src (upd C d (Cd' ++ [a])))] in
          let (p, C2) := move_loop m src T f (upd (upd C d Cd') e (C e ++ [a])) in
          (pre ++ AllToAll d e [a] :: p, C2)
      end
  end.

Definition canonical_x (m : mesh) (src dst : atype) (X : nat -> list nat) : plan :=
  let r := length src in
  let S := sax src in
  let D := sax dst in
  let A := fun d => S d ++ X d in
  let E := extras_f m r D A in
  let T := fun d => D d ++ E d in
  let (mv, C) := move_loop m src T (length m * length m + 1) A in
  slices_of r X ++ mv ++ finish src C T E.

(** [canonical] slices within the target's counts ([slicer] without budget). *)
Definition canonical (m : mesh) (src dst : atype) : plan :=
  canonical_x m src dst (slicer_f m (length src) (sax src) (sax dst) false).

(** * The greedy construction

    After the slices, move axes from the minor end of dimensions holding
    more size-[v] axes than the target towards dimensions holding fewer,
    several at once where they can go together ([single = false]); when no
    minor-end axis can move, one permute arranges every dimension (staying
    axes in target order, leaving axes at the minor end in the order they
    will land); the extras are then read off the result. *)
(** Axis lists of the greedy construction: dimension [d] is [ax C d]. *)
Definition ax (C : list (list nat)) (d : nat) : list nat := nth d C [].

Definition needs (m : mesh) (D C : list (list nat)) (e v : nat) : bool :=
  cnt m v (ax C e) <? cnt m v (ax D e).
Definition surplus (m : mesh) (D C : list (list nat)) (d v : nat) : bool :=
  cnt m v (ax D d) <? cnt m v (ax C d).

Definition needs_left (m : mesh) (r : nat) (D C : list (list nat)) : bool :=
  existsb (fun e => existsb (fun a => needs m D C e (asize m a)) (ax D e)) (seq 0 r).

Definition other_needs (m : mesh) (r : nat) (D C : list (list nat)) (d v : nat) : bool :=
  existsb (fun e => negb (e =? d) && needs m D C e v) (seq 0 r).

Definition pending_out (m : mesh) (r : nat) (D C : list (list nat)) (d : nat) : bool :=
  existsb (fun a => surplus m D C d (asize m a) && other_needs m r D C d (asize m a)) (ax C d).

Fixpoint extend (m : mesh) (single : bool) (Dd De : list nat) (rb cd ce grp : list nat) : list nat :=
  match rb with
  | [] => grp
  | b :: rb' =>
      let w := asize m b in
      if negb single && (cnt m w Dd <? cnt m w cd) && (cnt m w ce <? cnt m w De)
      then extend m single Dd De rb' (removelast cd) (ce ++ [b]) (b :: grp)
      else grp
  end.

Definition b2n (b : bool) : nat := if b then 1 else 0.

(** The best direct move from [d]: [(key, (d, e, axes))], least key first. *)
Definition direct_from (m : mesh) (single : bool) (r : nat) (D C : list (list nat)) (d : nat)
    : option (nat * (nat * nat * list nat)) :=
  match rev (ax C d) with
  | [] => None
  | a :: rb =>
      let v := asize m a in
      if negb (surplus m D C d v) then None else
      let es := filter (fun e => negb (e =? d) && needs m D C e v) (seq 0 r) in
      let ke := fun e => 2 * b2n (negb (memb a (ax D e))) + b2n (pending_out m r D C e) in
      match sort_by ke es with
      | [] => None
      | e :: _ =>
          let grp := extend m single (ax D d) (ax D e) rb (removelast (ax C d)) (ax C e ++ [a]) [a] in
          Some (2 * b2n (pending_out m r D C e) + b2n (negb (memb a (ax D e))), (d, e, grp))
      end
  end.

Definition best_direct (m : mesh) (single : bool) (r : nat) (D C : list (list nat))
    : option (nat * nat * list nat) :=
  option_map snd
    (fold_left (fun acc d =>
       match direct_from m single r D C d, acc with
       | None, _ => acc
       | Some x, None => Some x
       | Some x, Some y => if fst x <? fst y then Some x else acc
       end) (seq 0 r) None).

Definition total_need (m : mesh) (r : nat) (D C : list (list nat)) (d v : nat) : nat :=
  fold_right plus 0 (map (fun e => if e =? d then 0 else cnt m v (ax D e) - cnt m v (ax C e)) (seq 0 r)).

Definition arrange_dim (m : mesh) (r : nat) (D C : list (list nat)) (d : nat) : list nat :=
  let Cd := ax C d in
  let Dd := ax D d in
  let give := fun v => Nat.min (cnt m v Cd - cnt m v Dd) (total_need m r D C d v) in
  let wanted := fun a => existsb (fun e => negb (e =? d) && memb a (ax D e)) (seq 0 r) in
  let pr := fun a => if wanted a then 0 else if negb (memb a Dd) then 1 else 2 in
  let out := fold_left (fun out a =>
               if cnt m (asize m a) out <? give (asize m a) then out ++ [a] else out)
               (sort_by pr Cd) [] in
  let keep := filter (fun a => negb (memb a out)) Cd in
  let kk := fun a => if memb a Dd then index_of a Dd else length Dd + index_of a Cd in
  let big := S (length m) in
  let ko := fun a => big - fold_left Nat.min
                              (map (fun e => if memb a (ax D e) then index_of a (ax D e) else big) (seq 0 r)) big in
  sort_by kk keep ++ sort_by ko out.

Fixpoint greedy_loop (m : mesh) (src : atype) (D : list (list nat)) (single : bool) (fuel : nat)
    (C : list (list nat)) : plan * list (list nat) :=
  let r := length src in
  match fuel with
  | 0 => ([], C)
  | S f =>
      if negb (needs_left m r D C) then ([], C) else
      match best_direct m single r D C with
      | Some (d, e, grp) =>
          let C1 := set_nth (set_nth C d (firstn (length (ax C d) - length grp) (ax C d))) e (ax C e ++ grp) in
          let (p, C2) := greedy_loop m src D single f C1 in
          (AllToAll d e grp :: p, C2)
      | None =>
          let C1 := map (arrange_dim m r D C) (seq 0 r) in
          if list_eq_dec (list_eq_dec Nat.eq_dec) C1 C then ([], C) else
          let (p, C2) := greedy_loop m src D single f C1 in
          (AllPermute (tyof src (ax C1)) :: p, C2)
      end
  end.

Definition greedy_x (m : mesh) (src dst : atype) (X : nat -> list nat) (single : bool) : plan :=
  let r := length src in
  let S := sax src in
  let D := sax dst in
  let (mv, Cl) := greedy_loop m src (map D (seq 0 r)) single (2 * length m + 2)
                              (map (fun d => S d ++ X d) (seq 0 r)) in
  let C := ax Cl in
  let E := extras_f m r D C in
  slices_of r X ++ mv ++ finish src C (fun d => D d ++ E d) E.

(** [single] only matters when some all-to-all moves several axes: without
    one, both runs make the same plan, which is computed once. *)
Definition multi_a2a (p : plan) : bool :=
  existsb (fun c => match c with AllToAll _ _ (_ :: _ :: _) => true | _ => false end) p.

Definition greedy_both (m : mesh) (src dst : atype) (X : nat -> list nat) : list plan :=
  let p := greedy_x m src dst X false in
  if multi_a2a p then [p; greedy_x m src dst X true] else [p].

(** Slicing modes: 0 within the target's counts and budget, 1 within the
    counts, 2 also into the target's own dimension while the size divides. *)
Definition greedy (m : mesh) (src dst : atype) (mode : nat) (single : bool) : plan :=
  let r := length src in
  let S := sax src in
  let D := sax dst in
  let X := match mode with
           | 0 => slicer_f m r S D true
           | 1 => slicer_f m r S D false
           | _ => slicer_div_f m r S D (gs src)
           end in
  greedy_x m src dst X single.

(** * Validation *)

Definition is_slice (c : coll) : bool := match c with DynSlice _ _ => true | _ => false end.
Definition is_gather (c : coll) : bool := match c with AllGather _ _ => true | _ => false end.
Definition is_mid (c : coll) : bool :=
  match c with AllToAll _ _ _ | AllPermute _ => true | _ => false end.

(** Normal form: slices, then all-to-alls and permutes, then gathers. *)
Definition normal_form (p : plan) : Prop :=
  exists p1 p2 p3, p = p1 ++ p2 ++ p3 /\
    Forall (fun c => is_slice c = true) p1 /\
    Forall (fun c => is_mid c = true) p2 /\
    Forall (fun c => is_gather c = true) p3.

Fixpoint nf_mid (p : plan) : bool :=
  match p with
  | [] => true
  | c :: p' => if is_mid c then nf_mid p' else forallb is_gather p
  end.

Fixpoint nf_slices (p : plan) : bool :=
  match p with
  | [] => true
  | c :: p' => if is_slice c then nf_slices p' else nf_mid p
  end.

(** Slices add only axes [dst] uses; gathers remove only axes it does not use. *)
Definition axes_ok (dst : atype) (c : coll) : bool :=
  match c with
  | DynSlice _ xs => forallb (fun a => memb a (used dst)) xs
  | AllGather _ xs => forallb (fun a => negb (memb a (used dst))) xs
  | _ => true
  end.

Definition bound (m : mesh) (src dst : atype) : nat := Nat.max (size m src) (size m dst).

Definition validate (m : mesh) (src dst : atype) (p : plan) : option report :=
  match check m src dst p with
  | Ok r =>
      if (peak r <=? bound m src dst) && nf_slices p && forallb (axes_ok dst) p
      then Some r else None
  | Err _ => None
  end.

(** Whole axes. The core sees only the refined mesh; the parts of one
    axis are consecutive and appear together, in order, wherever the source
    or the target uses them. [glue] lists the parts [i] that every dimension
    of the source and the target holds together with [i + 1], right after it;
    plans that keep these pairs together can be written over whole axes. *)
Fixpoint adj (i j : nat) (l : list nat) : bool :=
  match l with
  | a :: ((b :: _) as t) => ((a =? i) && (b =? j)) || adj i j t
  | _ => false
  end.

Definition glued_in (i : nat) (l : list nat) : bool :=
  Bool.eqb (memb i l) (memb (S i) l) && (negb (memb i l) || adj i (S i) l).

Definition respects (G : list nat) (t : atype) : bool :=
  forallb (fun i => forallb (fun D => glued_in i (axes D)) t) G.

Definition glue (m : mesh) (src dst : atype) : list nat :=
  filter (fun i => (memb i (used src) || memb i (used dst)) && respects [i] src && respects [i] dst)
         (seq 0 (length m - 1)).

(** Traffic, then types that split a glued pair, then communicating collectives. *)
Definition cost (G : list nat) (p : plan) (r : report) : list nat :=
  [fold_right plus 0 (received r); length (filter (fun t => negb (respects G t)) (types r));
   length (filter (fun c => negb (is_slice c)) p)].

Fixpoint better (x y : list nat) : bool :=
  match x, y with
  | a :: x', b :: y' => (a <? b) || ((a =? b) && better x' y')
  | _, _ => false
  end.

(** The canonical plan, then the greedy ones for each slicing mode (see
    [greedy]), a mode whose slices equal an earlier mode's being skipped
    (it would make the same plans). *)
Definition candidates (m : mesh) (src dst : atype) : list plan :=
  let r := length src in
  let S := sax src in
  let D := sax dst in
  let X0 := slicer_f m r S D true in
  let X1 := slicer_f m r S D false in
  let X2 := slicer_div_f m r S D (gs src) in
  let k0 := map X0 (seq 0 r) in
  let k1 := map X1 (seq 0 r) in
  let k2 := map X2 (seq 0 r) in
  let same := fun k k' => if list_eq_dec (list_eq_dec Nat.eq_dec) k k' then true else false in
  canonical_x m src dst X1 ::
  greedy_both m src dst X0 ++
  (if same k1 k0 then [] else greedy_both m src dst X1) ++
  (if same k2 k0 || same k2 k1 then [] else greedy_both m src dst X2).

Definition coll_eq_dec : forall x y : coll, {x = y} + {x <> y}.
Proof.
  decide equality; try apply Nat.eq_dec; try apply (list_eq_dec Nat.eq_dec).
  apply (list_eq_dec dim_eq_dec).
Defined.

Definition plan_eqb (p q : plan) : bool := if list_eq_dec coll_eq_dec p q then true else false.

(** Validate each distinct candidate once (a repeated candidate cannot be
    strictly better than itself); keep the first of the least cost. *)
Definition pick_step (m : mesh) (src dst : atype) (G : list nat)
    (acc : list plan * option (plan * list nat)) (p : plan) : list plan * option (plan * list nat) :=
  if existsb (plan_eqb p) (fst acc) then acc else
  (p :: fst acc,
   match validate m src dst p with
   | None => snd acc
   | Some r =>
       let k := cost G p r in
       match snd acc with
       | Some (_, k0) => if better k k0 then Some (p, k) else snd acc
       | None => Some (p, k)
       end
   end).

Definition pick (m : mesh) (src dst : atype) (ps : list plan) : option plan :=
  option_map fst (snd (fold_left (pick_step m src dst (glue m src dst)) ps ([], None))).

(** The plan and whether the memory bound is guaranteed for it. *)
Definition synthesize (m : mesh) (src dst : atype) : bool * plan :=
  match pick m src dst (candidates m src dst) with
  | Some p => (true, p)
  | None => (false, naive m src dst)
  end.

(** * Properties of validation *)

Lemma pick_some : forall m src dst ps p,
  pick m src dst ps = Some p -> exists r, validate m src dst p = Some r.
Proof.
  intros m src dst ps p. unfold pick. set (G := glue m src dst).
  assert (H : forall acc, (forall q k, snd acc = Some (q, k) -> exists r, validate m src dst q = Some r) ->
    forall q k, snd (fold_left (pick_step m src dst G) ps acc) = Some (q, k) ->
    exists r, validate m src dst q = Some r).
  { induction ps as [|x ps IH]; simpl; intros acc Hacc q k Hf; [eapply Hacc; eauto|].
    eapply IH; [|exact Hf]. intros q' k' E. unfold pick_step in E.
    destruct (existsb (plan_eqb x) (fst acc)); [eapply Hacc; eauto|]. cbn [snd] in E.
    destruct (validate m src dst x) eqn:Ev; [|eapply Hacc; eauto].
    destruct (snd acc) as [[q0 k0]|] eqn:Ea.
    - destruct (better (cost G x r) k0).
      + inversion E; subst. eauto.
      + eapply Hacc; eauto.
    - inversion E; subst. eauto. }
  destruct (snd (fold_left _ ps ([], None))) as [[q k]|] eqn:E; simpl; intros Hp; inversion Hp; subst.
  eapply H; [|exact E]. intros; discriminate.
Qed.

Lemma validate_spec : forall m src dst p r, validate m src dst p = Some r ->
  check m src dst p = Ok r /\ peak r <= bound m src dst /\ nf_slices p = true /\
  forallb (axes_ok dst) p = true.
Proof.
  intros m src dst p r. unfold validate.
  destruct (check m src dst p) as [r'|]; [|discriminate].
  destruct ((peak r' <=? bound m src dst) && nf_slices p && forallb (axes_ok dst) p) eqn:E;
    [|discriminate].
  intros H; inversion H; subst. rewrite !andb_true_iff, Nat.leb_le in E. tauto.
Qed.

Lemma synthesize_true : forall m src dst,
  fst (synthesize m src dst) = true ->
  exists r, validate m src dst (snd (synthesize m src dst)) = Some r.
Proof.
  intros m src dst. unfold synthesize.
  destruct (pick m src dst (candidates m src dst)) eqn:E; simpl; [|discriminate].
  intros _. eapply pick_some; eauto.
Qed.

(** ** Normal form *)

Lemma nf_mid_spec : forall p, nf_mid p = true ->
  exists p2 p3, p = p2 ++ p3 /\ Forall (fun c => is_mid c = true) p2 /\
                Forall (fun c => is_gather c = true) p3.
Proof.
  induction p as [|c p IH]; simpl; intros H.
  - exists [], []. auto.
  - destruct (is_mid c) eqn:Ec.
    + destruct (IH H) as [p2 [p3 [-> [H2 H3]]]]. exists (c :: p2), p3. auto.
    + exists [], (c :: p). simpl. split; auto. split; auto.
      apply Forall_forall. intros x Hx. assert (Hg : forallb is_gather (c :: p) = true) by exact H. rewrite forallb_forall in Hg. apply Hg; auto.
Qed.

Lemma nf_slices_spec : forall p, nf_slices p = true -> normal_form p.
Proof.
  induction p as [|c p IH]; simpl; intros H.
  - exists [], [], []. auto.
  - destruct (is_slice c) eqn:Ec.
    + destruct (IH H) as [p1 [p2 [p3 [-> [H1 [H2 H3]]]]]].
      exists (c :: p1), p2, p3. auto.
    + destruct (nf_mid_spec (c :: p) H) as [p2 [p3 [E [H2 H3]]]].
      exists [], p2, p3. simpl. auto.
Qed.

(** What [axes_ok] says. *)
Definition axes_ok_prop (dst : atype) (c : coll) : Prop :=
  match c with
  | DynSlice _ xs => forall a, In a xs -> In a (used dst)
  | AllGather _ xs => forall a, In a xs -> ~ In a (used dst)
  | _ => True
  end.

Lemma axes_ok_spec : forall dst c, axes_ok dst c = true -> axes_ok_prop dst c.
Proof.
  intros dst c. destruct c; simpl; auto; rewrite forallb_forall; intros H a Ha.
  - specialize (H a Ha). apply negb_true_iff in H. intro Hin. apply memb_spec in Hin. congruence.
  - apply memb_spec. auto.
Qed.

(** ** The naive plan is always accepted *)

Lemma NoDup_app_l : forall A (l1 l2 : list A), NoDup (l1 ++ l2) -> NoDup l1.
Proof.
  induction l1; simpl; intros l2 H; [constructor|]. inversion H; subst.
  constructor; eauto. intro; apply H2, in_or_app; auto.
Qed.

Lemma NoDup_app_r : forall A (l1 l2 : list A), NoDup (l1 ++ l2) -> NoDup l2.
Proof. induction l1; simpl; intros l2 H; auto. inversion H; eauto. Qed.

Lemma NoDup_app_disj : forall A (l1 l2 : list A) a, NoDup (l1 ++ l2) -> In a l1 -> ~ In a l2.
Proof.
  induction l1; simpl; intros l2 x H Hx; [contradiction|]. inversion H; subst.
  destruct Hx as [->|Hx]; eauto. intro; apply H2, in_or_app; auto.
Qed.

Lemma NoDup_app_intro : forall A (l1 l2 : list A), NoDup l1 -> NoDup l2 ->
  (forall a, In a l1 -> ~ In a l2) -> NoDup (l1 ++ l2).
Proof.
  induction l1; simpl; intros l2 H1 H2 H; auto. inversion H1; subst. constructor.
  - intro Hin. apply in_app_or in Hin. destruct Hin; [contradiction|]. eapply H; eauto.
  - apply IHl1; auto.
Qed.

Lemma chain_app : forall m t p1 t1 p2 t2,
  chain m t p1 t1 -> chain m t1 p2 t2 -> chain m t (p1 ++ p2) t2.
Proof.
  intros m t p1 t1 p2 t2 H. induction H; simpl; intros; auto. econstructor; eauto.
Qed.

Lemma nth_error_app_len : forall A (P l : list A) x, nth_error (P ++ x :: l) (length P) = Some x.
Proof. intros. rewrite nth_error_app2 by lia. rewrite Nat.sub_diag. reflexivity. Qed.

Lemma set_nth_app_len : forall A (P l : list A) x y, set_nth (P ++ x :: l) (length P) y = P ++ y :: l.
Proof. induction P; simpl; intros; f_equal; auto. Qed.

Lemma naive_gathers : forall m l P,
  chain m (P ++ l)
    (flat_map (fun dD => match axes (snd dD) with [] => [] | xs => [AllGather (fst dD) xs] end)
              (combine (seq (length P) (length l)) l))
    (P ++ map (fun D => mkdim [] (gsize D)) l).
Proof.
  intros m l. induction l as [|D l IH]; intros P; simpl; [constructor|].
  replace (P ++ mkdim [] (gsize D) :: map (fun D => mkdim [] (gsize D)) l)
    with ((P ++ [mkdim [] (gsize D)]) ++ map (fun D => mkdim [] (gsize D)) l)
    by (rewrite <- app_assoc; reflexivity).
  assert (HS : S (length P) = length (P ++ [mkdim [] (gsize D)])) by (rewrite app_length; simpl; lia).
  destruct D as [xs g]; simpl.
  destruct xs as [|x xs'].
  - simpl. rewrite HS. replace (P ++ mkdim [] g :: l) with ((P ++ [mkdim [] g]) ++ l)
      by (rewrite <- app_assoc; reflexivity). apply IH.
  - econstructor.
    + apply (step_gather m (P ++ mkdim (x :: xs') g :: l) (length P) (x :: xs') [] g).
      * apply nth_error_app_len.
      * discriminate.
    + rewrite set_nth_app_len. rewrite HS.
      replace (P ++ mkdim [] g :: l) with ((P ++ [mkdim [] g]) ++ l)
        by (rewrite <- app_assoc; reflexivity). apply IH.
Qed.

Lemma used_app : forall t t', used (t ++ t') = used t ++ used t'.
Proof. intros. unfold used. apply flat_map_app. Qed.

Lemma used_empty_dims : forall l, used (map (fun D => mkdim [] (gsize D)) l) = [].
Proof. induction l; simpl; auto. Qed.

Lemma naive_slices : forall m l P,
  wf_mesh m -> Forall (wf_dim m) l -> NoDup (used (P ++ l)) ->
  chain m (P ++ map (fun D => mkdim [] (gsize D)) l)
    (flat_map (fun dD => match axes (snd dD) with [] => [] | xs => [DynSlice (fst dD) xs] end)
              (combine (seq (length P) (length l)) l))
    (P ++ l).
Proof.
  intros m l. induction l as [|D l IH]; intros P Hm Hwf Hnd; simpl; [rewrite app_nil_r; constructor|].
  inversion Hwf as [|? ? HD Hl]; subst.
  assert (HS : S (length P) = length (P ++ [D])) by (rewrite app_length; simpl; lia).
  assert (Hnd' : NoDup (used ((P ++ [D]) ++ l))) by (rewrite <- app_assoc; auto).
  destruct D as [xs g]; simpl.
  destruct xs as [|x xs'].
  - simpl. rewrite HS. replace (P ++ mkdim [] g :: map (fun D => mkdim [] (gsize D)) l)
      with ((P ++ [mkdim [] g]) ++ map (fun D => mkdim [] (gsize D)) l)
      by (rewrite <- app_assoc; reflexivity).
    replace (P ++ mkdim [] g :: l) with ((P ++ [mkdim [] g]) ++ l)
      by (rewrite <- app_assoc; reflexivity). apply IH; auto.
  - destruct HD as [Hg [Hax Hdiv]]. simpl in Hg, Hax, Hdiv.
    econstructor.
    + apply (step_slice m (P ++ mkdim [] g :: map (fun D => mkdim [] (gsize D)) l) (length P)
               (x :: xs') (mkdim [] g)).
      * apply nth_error_app_len.
      * discriminate.
      * auto.
      * rewrite used_app in Hnd. simpl in Hnd. apply NoDup_app_r in Hnd.
        eapply NoDup_app_l; eauto.
      * intros a Ha Hin. rewrite used_app in Hin. simpl in Hin. rewrite used_empty_dims in Hin.
        rewrite app_nil_r in Hin. rewrite used_app in Hnd. simpl in Hnd.
        apply (NoDup_app_disj _ _ _ a Hnd Hin). change (In a ((x :: xs') ++ used l)).
        apply in_or_app; auto.
      * unfold lsize. cbn [axes gsize]. replace (nprod m []) with 1 by reflexivity. rewrite Nat.div_1_r. auto.
    + rewrite set_nth_app_len. simpl. rewrite HS.
      replace (P ++ mkdim (x :: xs') g :: map (fun D => mkdim [] (gsize D)) l)
        with ((P ++ [mkdim (x :: xs') g]) ++ map (fun D => mkdim [] (gsize D)) l)
        by (rewrite <- app_assoc; reflexivity).
      replace (P ++ mkdim (x :: xs') g :: l) with ((P ++ [mkdim (x :: xs') g]) ++ l)
        by (rewrite <- app_assoc; reflexivity). apply IH; auto.
Qed.

Lemma map_empty_dims_eq : forall (l l' : atype), map gsize l = map gsize l' ->
  map (fun D => mkdim [] (gsize D)) l = map (fun D => mkdim [] (gsize D)) l'.
Proof.
  induction l; destruct l'; simpl; intros H; try discriminate; auto.
  inversion H. f_equal; auto.
Qed.

Lemma naive_chain : forall m src dst, valid_problem m src dst -> chain m src (naive m src dst) dst.
Proof.
  intros m src dst [Hs [Hd Hg]]. unfold naive. eapply chain_app.
  - apply (naive_gathers m src []).
  - simpl. rewrite (map_empty_dims_eq src dst Hg).
    destruct Hd as [Hm [Hwf Hnd]].
    apply (naive_slices m dst []); auto.
Qed.

(** * Theorem 1: the synthesizer is total *)
Theorem synthesize_correct : forall m src dst, valid_problem m src dst ->
  exists r, check m src dst (snd (synthesize m src dst)) = Ok r.
Proof.
  intros m src dst Hv. destruct (fst (synthesize m src dst)) eqn:E.
  - destruct (synthesize_true m src dst E) as [r Hr].
    apply validate_spec in Hr. exists r. tauto.
  - unfold synthesize in *. destruct (pick m src dst (candidates m src dst)); [discriminate|].
    simpl. apply check_accepts_iff_chain. split; auto. apply naive_chain; auto.
Qed.

(** * Theorem 2: memory *)
Lemma peak_of_ge : forall m ts t, In t ts -> size m t <= peak_of m ts.
Proof.
  induction ts as [|x ts IH]; simpl; intros t H; [contradiction|].
  destruct H as [->|H]; [lia|]. specialize (IH t H). lia.
Qed.

Theorem synthesize_memory : forall m src dst,
  fst (synthesize m src dst) = true ->
  exists r, check m src dst (snd (synthesize m src dst)) = Ok r /\
    peak r <= Nat.max (size m src) (size m dst) /\
    Forall (fun t => size m t <= Nat.max (size m src) (size m dst)) (types r).
Proof.
  intros m src dst H. destruct (synthesize_true m src dst H) as [r Hr].
  apply validate_spec in Hr. destruct Hr as [Hc [Hp _]]. exists r. split; auto. split; auto.
  apply check_ok_iff in Hc. destruct Hc as [_ [_ [_ Hpk]]].
  apply Forall_forall. intros t Ht. pose proof (peak_of_ge m (types r) t Ht).
  unfold bound in Hp. lia.
Qed.

(** * Theorem 3: normal form, and which axes slices and gathers touch *)
Theorem synthesize_normal_form : forall m src dst,
  fst (synthesize m src dst) = true ->
  normal_form (snd (synthesize m src dst)) /\
  Forall (axes_ok_prop dst) (snd (synthesize m src dst)).
Proof.
  intros m src dst H. destruct (synthesize_true m src dst H) as [r Hr].
  apply validate_spec in Hr. destruct Hr as [_ [_ [Hn Ha]]]. split.
  - apply nf_slices_spec; auto.
  - apply Forall_forall. intros c Hc. apply axes_ok_spec. rewrite forallb_forall in Ha. auto.
Qed.

(** * Theorem 4: traffic of the gathers *)

Lemma prod_set_nth : forall l d x y, nth_error l d = Some y ->
  prod (set_nth l d x) * y = prod l * x.
Proof.
  induction l as [|z l IH]; destruct d; simpl; intros x y H; try discriminate.
  - inversion H; subst. unfold prod; simpl. lia.
  - unfold prod in *; simpl. specialize (IH d x y H). nia.
Qed.

Lemma size_gather : forall m t d P xs g, wf m t -> nth_error t d = Some (mkdim (P ++ xs) g) ->
  size m (set_nth t d (mkdim P g)) = size m t * nprod m xs.
Proof.
  intros m t d P xs g Hw Hd.
  pose proof (wf_nth m t d _ Hw Hd) as HD. destruct Hw as [Hm _].
  assert (Hl := lsize_mul m _ Hm HD). assert (Hpos := lsize_pos m _ Hm HD).
  simpl in Hl. rewrite nprod_app in Hl.
  destruct HD as [_ [Hax _]]. simpl in Hax.
  assert (HP : 0 < nprod m P) by (apply nprod_pos; auto; intros; apply Hax, in_or_app; auto).
  assert (HlP : lsize m (mkdim P g) = lsize m (mkdim (P ++ xs) g) * nprod m xs).
  { set (L := lsize m {| axes := P ++ xs; gsize := g |}) in *.
    unfold lsize at 1. simpl. rewrite <- Hl.
    replace (L * (nprod m P * nprod m xs)) with (L * nprod m xs * nprod m P) by ring.
    apply Nat.div_mul. lia. }
  unfold size. rewrite map_set_nth.
  assert (E := prod_set_nth (map (lsize m) t) d (lsize m (mkdim P g)) (lsize m (mkdim (P ++ xs) g))).
  rewrite nth_error_map, Hd in E. specialize (E eq_refl).
  rewrite HlP in E.
  apply (Nat.mul_cancel_r _ _ (lsize m {| axes := P ++ xs; gsize := g |})); [lia|].
  rewrite HlP. rewrite E. ring.
Qed.

Lemma trace_hd : forall m t p ts rs, trace m t p ts rs -> exists ts', ts = t :: ts'.
Proof. intros m t p ts rs H. destruct H; eauto. Qed.

Lemma trace_length : forall m t p ts rs, trace m t p ts rs ->
  length ts = S (length p) /\ length rs = length p.
Proof. intros m t p ts rs H. induction H; simpl; lia. Qed.

Lemma trace_wf_all : forall m t p ts rs, trace m t p ts rs -> wf m t -> Forall (wf m) ts.
Proof.
  intros m t p ts rs H. induction H; intros Hw; constructor; auto.
  apply IHtrace. eapply step_wf; eauto.
Qed.

Lemma last_cons_default : forall A (x d : A) l, l <> [] -> last (x :: l) d = last l x.
Proof.
  intros A x d l H. destruct l; [congruence|]. simpl.
  clear H. revert a. induction l; simpl; auto.
Qed.

Lemma last_default_irrel : forall A (l : list A) d d', l <> [] -> last l d = last l d'.
Proof. induction l; simpl; intros; [congruence|]. destruct l; auto. apply IHl. discriminate. Qed.

(** Along any chain of gathers from [t], the elements received add up to the
    growth of the local size. *)
Theorem gathers_traffic : forall m t p ts rs, trace m t p ts rs -> wf m t ->
  Forall (fun c => is_gather c = true) p ->
  fold_right plus 0 rs + size m t = size m (last ts t).
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros Hw Hg; [simpl; auto|].
  inversion Hg as [|? ? Hc Hp]; subst.
  destruct (trace_hd _ _ _ _ _ Ht) as [ts' ->].
  rewrite last_cons_default by discriminate.
  rewrite (last_default_irrel _ (t1 :: ts') t t1) by discriminate. cbn [fold_right].
  rewrite <- IH by (auto; eapply step_wf; eauto).
  destruct c; try discriminate. inversion Hs as [d0 xs0 P g Hnth Hne| | |]; subst.
  simpl. rewrite (size_gather m t d P xs g Hw Hnth).
  assert (0 < nprod m xs).
  { apply nprod_pos; [apply Hw|]. intros a Ha.
    pose proof (wf_nth m t d _ Hw Hnth) as [_ [Hax _]]. apply Hax. simpl. apply in_or_app; auto. }
  destruct (nprod m xs) as [|k]; [lia|]. simpl. nia.
Qed.

Lemma trace_split : forall m p1 p2 t ts rs, trace m t (p1 ++ p2) ts rs ->
  trace m (nth (length p1) ts t) p2 (skipn (length p1) ts) (skipn (length p1) rs) /\
  chain m t p1 (nth (length p1) ts t).
Proof.
  intros m p1. induction p1 as [|c p1 IH]; simpl; intros p2 t ts rs H.
  - destruct (trace_hd _ _ _ _ _ H) as [ts' ->]. simpl. split; auto. constructor.
  - inversion H; subst. destruct (IH p2 t1 ts0 rs0 H6) as [H1 H2].
    destruct (trace_length _ _ _ _ _ H6) as [Hl _]. rewrite app_length in Hl.
    change (nth (S (length p1)) (t :: ts0) t) with (nth (length p1) ts0 t).
    replace (nth (length p1) ts0 t) with (nth (length p1) ts0 t1) by (apply nth_indep; lia). split; auto. econstructor; eauto.
Qed.

Lemma last_skipn : forall A (l : list A) k d, k < length l -> last (skipn k l) d = last l d.
Proof.
  induction l as [|a l IH]; intros k d H; simpl in *; [lia|].
  destruct k; simpl; auto. rewrite IH by lia. destruct l; simpl in *; [lia|]. reflexivity.
Qed.

Theorem synthesize_gather_traffic : forall m src dst,
  fst (synthesize m src dst) = true ->
  exists r p12 p3, check m src dst (snd (synthesize m src dst)) = Ok r /\
    snd (synthesize m src dst) = p12 ++ p3 /\
    Forall (fun c => is_gather c = false) p12 /\
    Forall (fun c => is_gather c = true) p3 /\
    chain m src p12 (nth (length p12) (types r) src) /\
    fold_right plus 0 (skipn (length p12) (received r)) =
      size m dst - size m (nth (length p12) (types r) src).
Proof.
  intros m src dst H. destruct (synthesize_true m src dst H) as [r Hr].
  apply validate_spec in Hr. destruct Hr as [Hc [_ [Hn _]]].
  destruct (nf_slices_spec _ Hn) as [p1 [p2 [p3 [Ep [H1 [H2 H3]]]]]].
  exists r, (p1 ++ p2), p3. rewrite Ep in *. rewrite <- app_assoc. split; auto. split; auto.
  split.
  { apply Forall_app. split; eapply Forall_impl; try eassumption; intros c Hc';
      destruct c; simpl in *; congruence. }
  split; auto.
  apply check_ok_iff in Hc. destruct Hc as [[Hs _] [Ht [Hlast _]]].
  rewrite app_assoc in Ht. destruct (trace_split m (p1 ++ p2) p3 src _ _ Ht) as [Hsuf Hpre].
  split; auto.
  assert (Hw : wf m (nth (length (p1 ++ p2)) (types r) src)).
  { pose proof (trace_wf_all _ _ _ _ _ Ht Hs) as HF. rewrite Forall_forall in HF. apply HF.
    apply nth_In. destruct (trace_length _ _ _ _ _ Ht) as [Hl _]. rewrite Hl, !app_length. lia. }
  pose proof (gathers_traffic _ _ _ _ _ Hsuf Hw H3) as E.
  destruct (trace_length _ _ _ _ _ Ht) as [Hl _].
  assert (Hne : skipn (length (p1 ++ p2)) (types r) <> []).
  { intro Hx. apply (f_equal (@length _)) in Hx. rewrite skipn_length in Hx. simpl in Hx.
    rewrite Hl, !app_length in Hx. lia. }
  assert (Hlast' : last (skipn (length (p1 ++ p2)) (types r)) (nth (length (p1 ++ p2)) (types r) src) = dst).
  { rewrite <- Hlast. rewrite (last_default_irrel _ _ _ src) by auto.
    apply last_skipn. rewrite Hl, !app_length. lia. }
  rewrite Hlast' in E. lia.
Qed.

(** * When the flag is guaranteed

    The canonical candidate always passes validation when the mesh can hold
    the counts it uses: [cap_ok] below, which holds whenever every axis has
    size 2 ([cap_ok_pow2]). *)
From Coq Require Import Permutation.

(** ** Generic lemmas *)

Lemma cnt_filter : forall m v l, cnt m v l = length (filter (fun a => asize m a =? v) l).
Proof. induction l as [|a l IH]; simpl; auto. destruct (asize m a =? v); simpl; auto. Qed.

Lemma cnt_app : forall m v l1 l2, cnt m v (l1 ++ l2) = cnt m v l1 + cnt m v l2.
Proof. intros. rewrite !cnt_filter. now rewrite filter_app, app_length. Qed.

Lemma cnt_cons : forall m v a l, cnt m v (a :: l) = (if asize m a =? v then 1 else 0) + cnt m v l.
Proof. intros. simpl. destruct (asize m a =? v); reflexivity. Qed.

Lemma cnt_single : forall m v a, cnt m v [a] = if asize m a =? v then 1 else 0.
Proof. intros. rewrite cnt_cons. simpl. lia. Qed.

Lemma cnt_perm : forall m v l l', Permutation l l' -> cnt m v l = cnt m v l'.
Proof.
  intros m v l l' H. induction H; rewrite ?cnt_cons; try lia.
Qed.

Lemma cnt_pos_in : forall m v l, 0 < cnt m v l -> exists a, In a l /\ asize m a = v.
Proof.
  induction l as [|a l IH]; intros H; [simpl in H; lia|].
  rewrite cnt_cons in H. destruct (Nat.eqb_spec (asize m a) v).
  - exists a. simpl. auto.
  - destruct (IH H) as [b [Hb Hv]]. exists b. simpl. auto.
Qed.

Lemma cnt_nodup_incl : forall m v l l', NoDup l -> incl l l' -> cnt m v l <= cnt m v l'.
Proof.
  intros. rewrite !cnt_filter. apply NoDup_incl_length.
  - apply NoDup_filter; auto.
  - intros x Hx. apply filter_In in Hx. apply filter_In. destruct Hx. split; auto.
Qed.

(** Only the axes of size [v] matter. *)
Lemma cnt_nodup_incl_v : forall m v l l', NoDup l ->
  (forall a, In a l -> asize m a = v -> In a l') -> cnt m v l <= cnt m v l'.
Proof.
  intros. rewrite !cnt_filter. apply NoDup_incl_length.
  - apply NoDup_filter; auto.
  - intros x Hx. apply filter_In in Hx. apply filter_In. destruct Hx as [H1 H2].
    apply Nat.eqb_eq in H2. split; auto. apply Nat.eqb_eq; auto.
Qed.

Lemma cnt_le_length : forall m v l, cnt m v l <= length l.
Proof. intros. rewrite cnt_filter. induction l; simpl; auto. destruct (asize m a =? v); simpl; lia. Qed.

Lemma nprod_perm : forall m l l', Permutation l l' -> nprod m l = nprod m l'.
Proof.
  intros m l l' H. unfold nprod. induction H; simpl; unfold prod in *; simpl in *; try lia.
Qed.

Lemma nprod_cons : forall m a l, nprod m (a :: l) = asize m a * nprod m l.
Proof. reflexivity. Qed.

(** Equal counts of every size give equal products. *)
Lemma nprod_cnt_eq : forall m l l', (forall v, cnt m v l = cnt m v l') -> nprod m l = nprod m l'.
Proof.
  intros m l. induction l as [|a l IH]; intros l' H.
  - destruct l' as [|b l']; auto. specialize (H (asize m b)). rewrite cnt_cons, Nat.eqb_refl in H.
    simpl in H. lia.
  - assert (Hp : 0 < cnt m (asize m a) l') by (rewrite <- H, cnt_cons, Nat.eqb_refl; lia).
    destruct (cnt_pos_in _ _ _ Hp) as [b [Hb Hv]].
    destruct (in_split _ _ Hb) as [l1 [l2 ->]].
    rewrite (nprod_perm m (l1 ++ b :: l2) (b :: l1 ++ l2)) by (symmetry; apply Permutation_middle).
    rewrite !nprod_cons, Hv. f_equal. apply IH. intros v. specialize (H v).
    rewrite cnt_cons in H. rewrite (cnt_perm m v (l1 ++ b :: l2) (b :: l1 ++ l2)) in H
      by (symmetry; apply Permutation_middle).
    rewrite cnt_cons, Hv in H. lia.
Qed.

Lemma remove_perm : forall l a, NoDup l -> In a l -> Permutation l (remove Nat.eq_dec a l ++ [a]).
Proof.
  induction l as [|b l IH]; intros a Hnd Ha; [inversion Ha|]. inversion Hnd; subst.
  simpl. destruct (Nat.eq_dec a b) as [->|Hne].
  - rewrite notin_remove by auto. apply Permutation_cons_append.
  - destruct Ha as [->|Ha]; [congruence|]. simpl. constructor. auto.
Qed.

(** Folds that keep an invariant, and folds after which a property holds of
    every element they went through. *)
Lemma fold_inv : forall {A B} (f : A -> B -> A) (I : A -> Prop) (l : list B) x,
  (forall x y, In y l -> I x -> I (f x y)) -> I x -> I (fold_left f l x).
Proof.
  intros A B f I l. induction l as [|y l IH]; simpl; intros x H Hx; [auto|apply IH; auto].
Qed.

Lemma fold_establish : forall {A B} (f : A -> B -> A) (Q : A -> B -> Prop) (l : list B) x,
  (forall x y z, Q x z -> Q (f x y) z) -> (forall x y, In y l -> Q (f x y) y) ->
  forall y, In y l -> Q (fold_left f l x) y.
Proof.
  intros A B f Q l. induction l as [|y l IH]; simpl; intros x Hs He z Hz; [contradiction|].
  destruct Hz as [<-|Hz]; auto.
  apply (fold_inv f (fun x => Q x y)); auto.
Qed.

Lemma first_some_none : forall {A B} (f : A -> option B) l, first_some f l = None -> forall x, In x l -> f x = None.
Proof.
  induction l as [|y l IH]; simpl; intros H x Hx; [contradiction|].
  destruct (f y) eqn:E; [discriminate|]. destruct Hx as [<-|Hx]; auto.
Qed.

Lemma first_some_some : forall {A B} (f : A -> option B) l z, first_some f l = Some z ->
  exists x, In x l /\ f x = Some z.
Proof.
  induction l as [|y l IH]; simpl; intros z H; [discriminate|].
  destruct (f y) eqn:E.
  - inversion H; subst. eauto.
  - destruct (IH z H) as [x [Hx Hf]]. eauto.
Qed.

Lemma sum_le : forall {A} (f g : A -> nat) l, (forall x, In x l -> f x <= g x) ->
  fold_right plus 0 (map f l) <= fold_right plus 0 (map g l).
Proof.
  induction l as [|y l IH]; simpl; intros H; auto. pose proof (H y (or_introl eq_refl)).
  assert (fold_right plus 0 (map f l) <= fold_right plus 0 (map g l)) by (apply IH; auto). lia.
Qed.

Lemma sum_lt : forall {A} (f g : A -> nat) l, (forall x, In x l -> f x <= g x) ->
  (exists x, In x l /\ f x < g x) ->
  fold_right plus 0 (map f l) < fold_right plus 0 (map g l).
Proof.
  induction l as [|y l IH]; simpl; intros H [x [Hx Hlt]]; [contradiction|].
  assert (Hy : f y <= g y) by auto.
  assert (Hl : fold_right plus 0 (map f l) <= fold_right plus 0 (map g l)) by (apply sum_le; auto).
  destruct Hx as [<-|Hx]; [lia|].
  assert (fold_right plus 0 (map f l) < fold_right plus 0 (map g l)) by (apply IH; eauto). lia.
Qed.

Lemma sum_bound : forall {A} (f : A -> nat) l k, (forall x, In x l -> f x <= k) ->
  fold_right plus 0 (map f l) <= length l * k.
Proof.
  induction l as [|y l IH]; simpl; intros k H; auto. specialize (IH k).
  assert (f y <= k) by auto. assert (fold_right plus 0 (map f l) <= length l * k) by auto. lia.
Qed.

(** ** Dimension functions: [allax] *)

Lemma in_allax : forall r f a, In a (allax r f) <-> exists d, d < r /\ In a (f d).
Proof.
  intros. unfold allax. rewrite in_flat_map. split.
  - intros [d [Hd Ha]]. apply in_seq in Hd. exists d. split; [lia|auto].
  - intros [d [Hd Ha]]. exists d. split; auto. apply in_seq. lia.
Qed.

Lemma allax_ext : forall r f g, (forall d, d < r -> f d = g d) -> allax r f = allax r g.
Proof.
  intros r f g H. unfold allax.
  assert (forall l, (forall x, In x l -> f x = g x) -> flat_map f l = flat_map g l).
  { induction l; simpl; intros Hl; auto. rewrite Hl, IHl; auto. }
  apply H0. intros x Hx. apply in_seq in Hx. apply H. lia.
Qed.

Lemma allax_S : forall r f, allax (S r) f = allax r f ++ f r.
Proof. intros. unfold allax. rewrite seq_S, flat_map_app. simpl. now rewrite app_nil_r. Qed.

Lemma allax_upd_perm : forall r f d l, d < r ->
  Permutation (allax r (upd f d l)) (l ++ allax r (upd f d [])).
Proof.
  induction r as [|r IH]; intros f d l Hd; [lia|]. rewrite !allax_S.
  destruct (Nat.eq_dec d r) as [->|Hne].
  - rewrite !upd_eq, app_nil_r.
    rewrite (allax_ext r (upd f r l) (upd f r [])) by (intros; rewrite !upd_neq by lia; auto).
    apply Permutation_app_comm.
  - rewrite !upd_neq by lia. rewrite app_assoc. apply Permutation_app_tail. apply IH. lia.
Qed.

Lemma allax_perm_split : forall r f d, d < r -> Permutation (allax r f) (f d ++ allax r (upd f d [])).
Proof.
  intros. rewrite <- (allax_ext r (upd f d (f d)) f) by (intros; unfold upd; destruct (Nat.eqb_spec d0 d); subst; auto).
  apply allax_upd_perm; auto.
Qed.

Lemma allax_upd_perm' : forall r f d l, d < r -> Permutation l (f d) ->
  Permutation (allax r (upd f d l)) (allax r f).
Proof.
  intros. rewrite allax_upd_perm by auto. rewrite (allax_perm_split r f d) by auto.
  apply Permutation_app_tail; auto.
Qed.

Lemma allax_upd_app : forall r f d l, d < r ->
  Permutation (allax r (upd f d (f d ++ l))) (l ++ allax r f).
Proof.
  intros. rewrite allax_upd_perm by auto. rewrite (allax_perm_split r f d) by auto.
  rewrite !app_assoc. apply Permutation_app_tail. apply Permutation_app_comm.
Qed.

Lemma allax_cat : forall r f g, Permutation (allax r (fun d => f d ++ g d)) (allax r f ++ allax r g).
Proof.
  induction r as [|r IH]; intros; simpl; auto. rewrite !allax_S.
  rewrite IH. rewrite <- !app_assoc. apply Permutation_app_head.
  rewrite !app_assoc. apply Permutation_app_tail. apply Permutation_app_comm.
Qed.

Lemma allax_nodup_dim : forall r f d, NoDup (allax r f) -> d < r -> NoDup (f d).
Proof.
  intros r f d H Hd. apply (Permutation_NoDup (allax_perm_split r f d Hd)) in H.
  eapply NoDup_app_l; eauto.
Qed.

Lemma allax_nodup_disj : forall r f d d' a, NoDup (allax r f) -> d < r -> d' < r ->
  In a (f d) -> In a (f d') -> d = d'.
Proof.
  intros r f d d' a H Hd Hd' Ha Ha'. destruct (Nat.eq_dec d d') as [|Hne]; auto. exfalso.
  apply (Permutation_NoDup (allax_perm_split r f d Hd)) in H.
  apply (NoDup_app_disj _ _ _ a H Ha). apply in_allax. exists d'. split; auto.
  rewrite upd_neq by auto. auto.
Qed.

(** Counting over all dimensions. *)
Lemma cnt_allax_le : forall m v r f g, (forall d, d < r -> cnt m v (f d) <= cnt m v (g d)) ->
  cnt m v (allax r f) <= cnt m v (allax r g).
Proof.
  induction r as [|r IH]; intros f g H; simpl; auto. rewrite !allax_S, !cnt_app.
  assert (cnt m v (allax r f) <= cnt m v (allax r g)) by (apply IH; auto).
  specialize (H r). lia.
Qed.

Lemma cnt_allax_lt : forall m v r f g, (forall d, d < r -> cnt m v (f d) <= cnt m v (g d)) ->
  (exists d, d < r /\ cnt m v (f d) < cnt m v (g d)) ->
  cnt m v (allax r f) < cnt m v (allax r g).
Proof.
  induction r as [|r IH]; intros f g H [d [Hd Hlt]]; [lia|]. rewrite !allax_S, !cnt_app.
  destruct (Nat.eq_dec d r) as [->|Hne].
  - assert (cnt m v (allax r f) <= cnt m v (allax r g)) by (apply cnt_allax_le; auto). lia.
  - assert (cnt m v (allax r f) < cnt m v (allax r g)) by (apply IH; eauto; exists d; split; auto; lia).
    specialize (H r). lia.
Qed.

Lemma nodup_in_range_length : forall k l, NoDup l -> (forall a, In a l -> a < k) -> length l <= k.
Proof.
  intros k l H Hr. rewrite <- (seq_length k 0). apply NoDup_incl_length; auto.
  intros a Ha. apply in_seq. specialize (Hr a Ha). lia.
Qed.

(** ** Types built from dimension functions *)

Lemma nth_error_seq0 : forall n d, d < n -> nth_error (seq 0 n) d = Some d.
Proof.
  intros n d H. rewrite nth_error_nth' with (d := 0) by (rewrite seq_length; auto).
  rewrite seq_nth; auto.
Qed.

Lemma tyof_length : forall t f, length (tyof t f) = length t.
Proof. intros. unfold tyof. now rewrite map_length, seq_length. Qed.

Lemma nth_error_tyof : forall t f d, d < length t -> nth_error (tyof t f) d = Some (mkdim (f d) (gs t d)).
Proof. intros. unfold tyof. rewrite nth_error_map, nth_error_seq0; auto. Qed.

Lemma tyof_ext : forall t f g, (forall d, d < length t -> f d = g d) -> tyof t f = tyof t g.
Proof.
  intros t f g H. unfold tyof. apply map_ext_in. intros d Hd. apply in_seq in Hd.
  rewrite H by lia. auto.
Qed.

Lemma set_nth_map_seq : forall {A} n s (h : nat -> A) i x, i < n ->
  set_nth (map h (seq s n)) i x = map (fun k => if k =? s + i then x else h k) (seq s n).
Proof.
  intros A n. induction n as [|n IH]; intros s h i x Hi; [lia|]. simpl.
  destruct i as [|i].
  - rewrite Nat.add_0_r, Nat.eqb_refl. f_equal. apply map_ext_in. intros k Hk.
    apply in_seq in Hk. destruct (Nat.eqb_spec k s); [lia|auto].
  - destruct (Nat.eqb_spec s (s + S i)); [lia|]. f_equal.
    rewrite IH by lia. apply map_ext_in. intros k Hk.
    replace (S s + i) with (s + S i) by lia. auto.
Qed.

Lemma set_nth_tyof : forall t f d l, d < length t ->
  set_nth (tyof t f) d (mkdim l (gs t d)) = tyof t (upd f d l).
Proof.
  intros. unfold tyof. rewrite set_nth_map_seq by auto.
  apply map_ext. intros k. simpl. unfold upd. destruct (Nat.eqb_spec k d); subst; auto.
Qed.

Lemma used_tyof : forall t f, used (tyof t f) = allax (length t) f.
Proof.
  intros. unfold used, tyof, allax. generalize (seq 0 (length t)).
  induction l; simpl; auto. now rewrite IHl.
Qed.

Lemma map_nth_seq : forall {A} (l : list A) x, map (fun d => nth d l x) (seq 0 (length l)) = l.
Proof.
  intros A l x. induction l as [|a l IH]; simpl; auto. f_equal.
  rewrite <- seq_shift, map_map. simpl. auto.
Qed.

Lemma tyof_self : forall t, tyof t (sax t) = t.
Proof.
  intros t. unfold tyof, sax, gs.
  transitivity (map (fun d => nth d t dd0) (seq 0 (length t))); [|apply map_nth_seq].
  apply map_ext. intros d. destruct (nth d t dd0); auto.
Qed.

Lemma map_gsize_tyof : forall t f, map gsize (tyof t f) = map gsize t.
Proof.
  intros t f. transitivity (map gsize (tyof t (sax t))); [|now rewrite tyof_self].
  unfold tyof. rewrite !map_map. auto.
Qed.

Lemma gs_map : forall t t', map gsize t = map gsize t' -> forall d, gs t d = gs t' d.
Proof.
  intros t t' H d. unfold gs. rewrite <- (map_nth gsize t dd0 d), <- (map_nth gsize t' dd0 d).
  now rewrite H.
Qed.

(** The mesh has room for the counts of sizes the construction uses: in
    every dimension, any set of axes with at most as many axes of each size
    as the source or the target has there divides the global size. *)
Definition cap_ok (m : mesh) (src dst : atype) : Prop :=
  forall d L, d < length src -> NoDup L -> (forall a, In a L -> a < length m) ->
    (forall v, cnt m v L <= Nat.max (cnt m v (sax src d)) (cnt m v (sax dst d))) ->
    Nat.divide (nprod m L) (gs src d).

(** Dimension functions within those counts. *)
Definition good (m : mesh) (src dst : atype) (f : nat -> list nat) : Prop :=
  NoDup (allax (length src) f) /\ (forall a, In a (allax (length src) f) -> a < length m) /\
  (forall d v, d < length src -> cnt m v (f d) <= Nat.max (cnt m v (sax src d)) (cnt m v (sax dst d))).

Lemma good_div : forall m src dst f d, cap_ok m src dst -> good m src dst f -> d < length src ->
  Nat.divide (nprod m (f d)) (gs src d).
Proof.
  intros m src dst f d Hc [Hn [Hr Hcnt]] Hd. apply Hc; auto.
  - eapply allax_nodup_dim; eauto.
  - intros a Ha. apply Hr. apply in_allax. eauto.
Qed.

Lemma valid_gs_pos : forall m src dst d, valid_problem m src dst -> d < length src -> 0 < gs src d.
Proof.
  intros m src dst d [[_ [HF _]] _] Hd. rewrite Forall_forall in HF.
  apply (HF (nth d src dd0)). apply nth_In; auto.
Qed.

Lemma good_wf : forall m src dst f, valid_problem m src dst -> cap_ok m src dst ->
  good m src dst f -> wf m (tyof src f).
Proof.
  intros m src dst f Hv Hc Hg. pose proof Hg as [Hn [Hr _]]. split; [apply Hv|]. split.
  - apply Forall_forall. intros x Hx. unfold tyof in Hx. apply in_map_iff in Hx.
    destruct Hx as [d [<- Hd]]. apply in_seq in Hd. repeat split; simpl.
    + eapply valid_gs_pos; eauto. lia.
    + intros a Ha. apply Hr, in_allax. exists d. split; [lia|auto].
    + apply (good_div m src dst); auto. lia.
  - rewrite used_tyof. auto.
Qed.

Lemma div_helper : forall a b g, 0 < a -> Nat.divide (a * b) g -> Nat.divide b (g / a).
Proof.
  intros a b g Ha [k Hk]. subst g. exists k.
  replace (k * (a * b)) with ((k * b) * a) by ring. rewrite Nat.div_mul by lia. ring.
Qed.

(** The four kinds of steps between types built from dimension functions. *)
Lemma step_slice_tyof : forall m src dst f d xs, valid_problem m src dst -> cap_ok m src dst ->
  good m src dst (upd f d (f d ++ xs)) -> d < length src -> xs <> [] ->
  (forall a, In a xs -> ~ In a (allax (length src) f)) ->
  step m (tyof src f) (DynSlice d xs) (tyof src (upd f d (f d ++ xs))).
Proof.
  intros m src dst f d xs Hv Hc Hg Hd Hne Hx.
  pose proof Hg as [Hn [Hr _]].
  assert (Hfd : NoDup (f d ++ xs)) by (rewrite <- (upd_eq _ f d (f d ++ xs)); eapply allax_nodup_dim; eauto).
  assert (Hin : forall a, In a (f d ++ xs) -> a < length m).
  { intros a Ha. apply Hr, in_allax. exists d. rewrite upd_eq. auto. }
  rewrite <- set_nth_tyof by auto.
  replace (mkdim (f d ++ xs) (gs src d)) with (mkdim (axes (mkdim (f d) (gs src d)) ++ xs) (gsize (mkdim (f d) (gs src d)))) by reflexivity.
  apply step_slice.
  - apply nth_error_tyof; auto.
  - auto.
  - intros a Ha. apply Hin, in_or_app; auto.
  - eapply NoDup_app_r; eauto.
  - rewrite used_tyof. auto.
  - unfold lsize. simpl. apply div_helper.
    + apply nprod_pos; [apply Hv|]. intros a Ha. apply Hin, in_or_app; auto.
    + rewrite <- nprod_app. rewrite <- (upd_eq _ f d (f d ++ xs)). apply (good_div m src dst); auto.
Qed.

Lemma step_gather_tyof : forall m src f d P xs, d < length src -> f d = P ++ xs -> xs <> [] ->
  step m (tyof src f) (AllGather d xs) (tyof src (upd f d P)).
Proof.
  intros. rewrite <- set_nth_tyof by auto. apply step_gather; auto.
  rewrite nth_error_tyof by auto. congruence.
Qed.

Lemma step_a2a_tyof : forall m src dst f d e P xs, valid_problem m src dst -> cap_ok m src dst ->
  good m src dst (upd (upd f d P) e (f e ++ xs)) -> d < length src -> e < length src -> d <> e ->
  f d = P ++ xs -> xs <> [] ->
  step m (tyof src f) (AllToAll d e xs) (tyof src (upd (upd f d P) e (f e ++ xs))).
Proof.
  intros m src dst f d e P xs Hv Hc Hg Hd He Hde HP Hne.
  pose proof Hg as [Hn [Hr _]].
  assert (Hin : forall a, In a (f e ++ xs) -> a < length m).
  { intros a Ha. apply Hr, in_allax. exists e. rewrite upd_eq. auto. }
  rewrite <- set_nth_tyof by auto.
  rewrite <- set_nth_tyof by auto.
  replace (f e) with (upd f d P e) by (rewrite upd_neq; auto).
  replace (mkdim (upd f d P e ++ xs) (gs src e))
    with (mkdim (axes (mkdim (f e) (gs src e)) ++ xs) (gsize (mkdim (f e) (gs src e))))
    by (rewrite upd_neq; auto).
  apply step_alltoall with (g := gs src d); auto.
  - rewrite nth_error_tyof; congruence.
  - rewrite nth_error_tyof; auto.
  - unfold lsize. simpl. apply div_helper.
    + apply nprod_pos; [apply Hv|]. intros a Ha. apply Hin, in_or_app; auto.
    + rewrite <- nprod_app. rewrite <- (upd_eq _ (upd f d P) e (f e ++ xs)). apply (good_div m src dst); auto.
Qed.

Lemma step_permute_tyof : forall m src dst f g, valid_problem m src dst -> cap_ok m src dst ->
  good m src dst g -> (forall d v, d < length src -> cnt m v (f d) = cnt m v (g d)) ->
  step m (tyof src f) (AllPermute (tyof src g)) (tyof src g).
Proof.
  intros m src dst f g Hv Hc Hg Hcnt. apply step_permute.
  - eapply good_wf; eauto.
  - now rewrite !map_gsize_tyof.
  - unfold tyof. rewrite !map_map. apply map_ext_in. intros d Hd. apply in_seq in Hd.
    unfold lsize. simpl. rewrite (nprod_cnt_eq m (g d) (f d)); auto.
    intros v. rewrite Hcnt by lia. auto.
Qed.

(** ** Pointwise equality of dimension functions *)

Definition feq (r : nat) (f g : nat -> list nat) : Prop := forall d, d < r -> f d = g d.

Lemma good_ext : forall m src dst f g, feq (length src) f g -> good m src dst f -> good m src dst g.
Proof.
  intros m src dst f g H [Hn [Hr Hc]]. rewrite (allax_ext _ f g H) in *. split; [|split]; auto.
  intros d v Hd. rewrite <- H by auto. auto.
Qed.

Lemma good_prefix : forall m src dst f g, good m src dst g ->
  (forall d, d < length src -> exists l, g d = f d ++ l) -> good m src dst f.
Proof.
  intros m src dst f g [Hn [Hr Hc]] H.
  set (rest := fun d => skipn (length (f d)) (g d)).
  assert (Hg : feq (length src) g (fun d => f d ++ rest d)).
  { intros d Hd. unfold rest. destruct (H d Hd) as [l ->].
    rewrite skipn_app, skipn_all, Nat.sub_diag. simpl. auto. }
  rewrite (allax_ext _ _ _ Hg) in Hn, Hr.
  assert (Hp := allax_cat (length src) f rest).
  split; [|split].
  - apply (Permutation_NoDup Hp) in Hn. eapply NoDup_app_l; eauto.
  - intros a Ha. apply Hr. apply (Permutation_in _ (Permutation_sym Hp)). apply in_or_app; auto.
  - intros d v Hd. specialize (Hc d v Hd). rewrite Hg in Hc by auto. rewrite cnt_app in Hc. lia.
Qed.

Lemma pairs_in : forall r F l d a, In (d, a) (pairs r F l) -> d < r /\ (In a (F d) \/ In a l).
Proof.
  intros r F l d a H. unfold pairs in H. apply in_app_or in H.
  destruct H as [H|H]; apply in_flat_map in H; destruct H as [d' [Hd' H]];
    apply in_map_iff in H; destruct H as [a' [E Ha]]; inversion E; subst;
    apply in_seq in Hd'; split; auto; lia.
Qed.

Lemma pairs_in2 : forall r F l d a, d < r -> In a l -> In (d, a) (pairs r F l).
Proof.
  intros. unfold pairs. apply in_or_app. right. apply in_flat_map. exists d.
  split; [apply in_seq; lia|]. apply in_map. auto.
Qed.

(** Growing one dimension keeps what was there. *)
Lemma upd_app_in : forall r f d l a, In a (allax r f) -> In a (allax r (upd f d (f d ++ l))).
Proof.
  intros r f d l a H. apply in_allax in H. destruct H as [d' [Hd' Ha]]. apply in_allax.
  exists d'. split; auto. unfold upd. destruct (Nat.eqb_spec d' d); subst; auto. apply in_or_app; auto.
Qed.

Lemma upd_app_cnt : forall m v f d l d', cnt m v (f d') <= cnt m v (upd f d (f d ++ l) d').
Proof.
  intros. unfold upd. destruct (Nat.eqb_spec d' d); subst; auto. rewrite cnt_app. lia.
Qed.

Lemma cnt_allax_cat : forall m v r f g,
  cnt m v (allax r (fun d => f d ++ g d)) = cnt m v (allax r f) + cnt m v (allax r g).
Proof. intros. rewrite (cnt_perm _ _ _ _ (allax_cat r f g)). apply cnt_app. Qed.

(** ** The slices *)

Definition slices_inv (m : mesh) (r : nat) (S D X : nat -> list nat) : Prop :=
  NoDup (allax r S ++ allax r X) /\ (forall a, In a (allax r X) -> In a (allax r D)) /\
  (forall d v, d < r -> cnt m v (S d ++ X d) <= Nat.max (cnt m v (S d)) (cnt m v (D d))).

Lemma slicer_inv : forall m r S D budget, NoDup (allax r S) ->
  slices_inv m r S D (slicer m r S D budget).
Proof.
  intros m r S D budget HS. unfold slicer. apply fold_inv.
  - intros X [d a] Hy [Hn [HD Hc]]. apply pairs_in in Hy. destruct Hy as [Hd Ha].
    assert (HaD : In a (allax r D)) by (destruct Ha; auto; apply in_allax; eauto).
    unfold slice_step, grow. simpl. destruct (slice_ok m r S D budget X d a) eqn:Eok; [|split; auto].
    unfold slice_ok in Eok. rewrite !andb_true_iff, !negb_true_iff in Eok.
    destruct Eok as [[[E1 E2] E3] _].
    assert (N1 : ~ In a (allax r S)) by (intro H; apply memb_spec in H; congruence).
    assert (N2 : ~ In a (allax r X)) by (intro H; apply memb_spec in H; congruence).
    apply Nat.ltb_lt in E3.
    assert (Hp := allax_upd_app r X d [a] Hd).
    split; [|split].
    + apply (Permutation_NoDup (l := allax r S ++ [a] ++ allax r X)).
      * apply Permutation_app_head. symmetry. auto.
      * simpl. apply NoDup_app_intro.
        -- eapply NoDup_app_l; eauto.
        -- constructor; [auto|]. eapply NoDup_app_r; eauto.
        -- intros b Hb [<-|Hb']; [contradiction|]. eapply NoDup_app_disj; eauto.
    + intros b Hb. apply (Permutation_in _ Hp) in Hb. destruct Hb as [<-|Hb]; auto.
    + intros d' v Hd'. unfold upd. destruct (Nat.eqb_spec d' d); subst; auto.
      rewrite app_assoc, cnt_app, cnt_single. destruct (Nat.eqb_spec (asize m a) v); subst; [lia|].
      specialize (Hc d v Hd'). lia.
  - split; [|split].
    + unfold allax at 2. replace (flat_map (fun _ : nat => []) (seq 0 r)) with (@nil nat).
      * rewrite app_nil_r. auto.
      * generalize (seq 0 r). induction l; simpl; auto.
    + intros a Ha. apply in_allax in Ha. destruct Ha as [_ [_ []]].
    + intros d v Hd. rewrite app_nil_r. lia.
Qed.

(** Every target axis of size [v] is sliced unless every dimension already
    holds as many size-[v] axes as the target's: in all, at least as many
    axes of every size as the target. *)
Lemma slicer_covers : forall m r S D v, NoDup (allax r S) -> NoDup (allax r D) ->
  cnt m v (allax r D) <= cnt m v (allax r S) + cnt m v (allax r (slicer m r S D false)).
Proof.
  intros m r S D v HS HD. set (X := slicer m r S D false).
  set (Q := fun (X : nat -> list nat) (p : nat * nat) =>
              In (snd p) (allax r S) \/ In (snd p) (allax r X) \/
              cnt m (asize m (snd p)) (D (fst p)) <= cnt m (asize m (snd p)) (S (fst p) ++ X (fst p))).
  assert (HQ : forall p, In p (pairs r D (allax r D)) -> Q X p).
  { apply fold_establish.
    - intros X0 [d0 a0] [d1 a1] Hq. unfold slice_step, grow. simpl.
      destruct (slice_ok m r S D false X0 d0 a0); auto.
      unfold Q in *. simpl in *. destruct Hq as [H|[H|H]]; auto.
      + right; left. apply upd_app_in; auto.
      + right; right. rewrite cnt_app in *. pose proof (upd_app_cnt m (asize m a1) X0 d0 [a0] d1). lia.
    - intros X0 [d a] Hy. apply pairs_in in Hy. destruct Hy as [Hd _].
      unfold slice_step, grow, Q. simpl. destruct (slice_ok m r S D false X0 d a) eqn:Eok.
      + right; left. apply in_allax. exists d. rewrite upd_eq. split; auto. apply in_or_app; simpl; auto.
      + unfold slice_ok in Eok. simpl in Eok. rewrite andb_true_r in Eok.
        apply andb_false_iff in Eok. destruct Eok as [Eok|Eok].
        * apply andb_false_iff in Eok. rewrite !negb_false_iff, !memb_spec in Eok. tauto.
        * apply Nat.ltb_ge in Eok. auto. }
  destruct (existsb (fun a => (asize m a =? v) && negb (memb a (allax r S)) && negb (memb a (allax r X)))
                    (allax r D)) eqn:Ex.
  - apply existsb_exists in Ex. destruct Ex as [a [Ha Hb]].
    rewrite !andb_true_iff, !negb_true_iff, Nat.eqb_eq in Hb. destruct Hb as [[Hv HnS] HnX].
    rewrite <- cnt_allax_cat. apply cnt_allax_le. intros d Hd.
    destruct (HQ (d, a) (pairs_in2 _ _ _ _ _ Hd Ha)) as [H|[H|H]]; simpl in H.
    + apply memb_spec in H. congruence.
    + apply memb_spec in H. congruence.
    + rewrite Hv in H. auto.
  - rewrite <- cnt_app. apply cnt_nodup_incl_v; auto. intros a Ha Hv.
    assert (Hf := existsb_exists (fun a => (asize m a =? v) && negb (memb a (allax r S)) && negb (memb a (allax r X))) (allax r D)).
    destruct (memb a (allax r S)) eqn:E1; [apply memb_spec in E1; apply in_or_app; auto|].
    destruct (memb a (allax r X)) eqn:E2; [apply memb_spec in E2; apply in_or_app; auto|].
    exfalso. assert (existsb (fun a => (asize m a =? v) && negb (memb a (allax r S)) && negb (memb a (allax r X))) (allax r D) = true).
    { apply Hf. exists a. split; auto. rewrite E1, E2, Hv, Nat.eqb_refl. auto. }
    congruence.
Qed.

(** ** The extras *)

Definition extras_inv (m : mesh) (r : nat) (D A E : nat -> list nat) : Prop :=
  NoDup (allax r D ++ allax r E) /\ (forall a, In a (allax r E) -> a < length m) /\
  (forall d v, d < r -> cnt m v (D d ++ E d) <= Nat.max (cnt m v (D d)) (cnt m v (A d))) /\
  (forall v, cnt m v (allax r D) + cnt m v (allax r E) <=
             Nat.max (cnt m v (allax r D)) (cnt m v (allax r A))).

Lemma allax_nil : forall r, allax r (fun _ => []) = [].
Proof. intros. unfold allax. generalize (seq 0 r). induction l; simpl; auto. Qed.

Lemma extras_inv_holds : forall m r D A, NoDup (allax r D) ->
  (forall a, In a (allax r A) -> a < length m) -> extras_inv m r D A (extras m r D A).
Proof.
  intros m r D A HD HA. unfold extras. apply fold_inv.
  - intros E [d a] Hy [Hn [Hr [Hc Hs]]]. apply pairs_in in Hy. destruct Hy as [Hd Ha].
    assert (Ham : a < length m).
    { destruct Ha as [Ha|Ha]; [apply HA, in_allax; eauto|apply in_seq in Ha; lia]. }
    unfold extra_step, grow. simpl. destruct (extra_ok m r D A E d a) eqn:Eok; [|split; auto].
    unfold extra_ok in Eok. rewrite !andb_true_iff, !negb_true_iff, !Nat.ltb_lt in Eok.
    destruct Eok as [[[E1 E2] E3] E4].
    assert (N1 : ~ In a (allax r D)) by (intro H; apply memb_spec in H; congruence).
    assert (N2 : ~ In a (allax r E)) by (intro H; apply memb_spec in H; congruence).
    assert (Hp := allax_upd_app r E d [a] Hd).
    split; [|split; [|split]].
    + apply (Permutation_NoDup (l := allax r D ++ [a] ++ allax r E)).
      * apply Permutation_app_head. symmetry. auto.
      * simpl. apply NoDup_app_intro.
        -- eapply NoDup_app_l; eauto.
        -- constructor; [auto|]. eapply NoDup_app_r; eauto.
        -- intros b Hb [<-|Hb']; [contradiction|]. eapply NoDup_app_disj; eauto.
    + intros b Hb. apply (Permutation_in _ Hp) in Hb. destruct Hb as [<-|Hb]; auto.
    + intros d' v Hd'. unfold upd. destruct (Nat.eqb_spec d' d); subst; auto.
      rewrite app_assoc, cnt_app, cnt_single. destruct (Nat.eqb_spec (asize m a) v); subst; [lia|].
      specialize (Hc d v Hd'). lia.
    + intros v. rewrite (cnt_perm _ _ _ _ Hp), cnt_app, cnt_single.
      specialize (Hs v). destruct (Nat.eqb_spec (asize m a) v); subst; lia.
  - unfold extras_inv. rewrite !allax_nil, app_nil_r. split; [|split; [|split]]; auto.
    + intros a [].
    + intros d v Hd. rewrite app_nil_r. lia.
    + intros v. simpl. lia.
Qed.

(** The extras reach the budget: the pre-gather type holds as many axes of
    every size as the axes held after the slices. *)
Lemma extras_complete : forall m r D A v, NoDup (allax r D) -> NoDup (allax r A) ->
  (forall a, In a (allax r A) -> a < length m) -> cnt m v (allax r D) <= cnt m v (allax r A) ->
  cnt m v (allax r D) + cnt m v (allax r (extras m r D A)) = cnt m v (allax r A).
Proof.
  intros m r D A v HD HAn HA Hle. set (E := extras m r D A).
  destruct (extras_inv_holds m r D A HD HA) as [Hn [_ [_ Hs]]]. fold E in Hn, Hs.
  specialize (Hs v).
  destruct (Nat.lt_ge_cases (cnt m v (allax r D) + cnt m v (allax r E)) (cnt m v (allax r A))) as [Hlt|];
    [|lia].
  exfalso.
  set (Q := fun (E : nat -> list nat) (p : nat * nat) =>
              In (snd p) (allax r D) \/ In (snd p) (allax r E) \/
              cnt m (asize m (snd p)) (A (fst p)) <= cnt m (asize m (snd p)) (D (fst p) ++ E (fst p)) \/
              cnt m (asize m (snd p)) (allax r A) <=
                cnt m (asize m (snd p)) (allax r D) + cnt m (asize m (snd p)) (allax r E)).
  assert (HQ : forall p, In p (pairs r A (seq 0 (length m))) -> Q E p).
  { apply fold_establish.
    - intros E0 [d0 a0] [d1 a1] Hq. unfold extra_step, grow. simpl.
      destruct (extra_ok m r D A E0 d0 a0); auto.
      unfold Q in *. simpl in *. destruct Hq as [H|[H|[H|H]]]; auto.
      + right; left. apply upd_app_in; auto.
      + right; right; left. rewrite cnt_app in *. pose proof (upd_app_cnt m (asize m a1) E0 d0 [a0] d1). lia.
      + right; right; right.
        destruct (le_lt_dec r d0).
        * rewrite (allax_ext r (upd E0 d0 (E0 d0 ++ [a0])) E0) by (intros; rewrite upd_neq by lia; auto). auto.
        * rewrite (cnt_perm _ _ _ _ (allax_upd_app r E0 d0 [a0] l)), cnt_app. lia.
    - intros E0 [d a] Hy. apply pairs_in in Hy. destruct Hy as [Hd _].
      unfold extra_step, grow, Q. simpl. destruct (extra_ok m r D A E0 d a) eqn:Eok.
      + right; left. apply in_allax. exists d. rewrite upd_eq. split; auto. apply in_or_app; simpl; auto.
      + unfold extra_ok in Eok. rewrite !andb_false_iff, !negb_false_iff, !memb_spec, !Nat.ltb_ge in Eok.
        tauto. }
  destruct (existsb (fun a => (asize m a =? v) && negb (memb a (allax r D)) && negb (memb a (allax r E)))
                    (seq 0 (length m))) eqn:Ex.
  - apply existsb_exists in Ex. destruct Ex as [a [Ha Hb]].
    rewrite !andb_true_iff, !negb_true_iff, Nat.eqb_eq in Hb. destruct Hb as [[Hv HnD] HnE].
    assert (cnt m v (allax r A) <= cnt m v (allax r (fun d => D d ++ E d))).
    { apply cnt_allax_le. intros d Hd.
      destruct (HQ (d, a) (pairs_in2 _ _ _ _ _ Hd Ha)) as [H|[H|[H|H]]]; simpl in H.
      + apply memb_spec in H. congruence.
      + apply memb_spec in H. congruence.
      + rewrite Hv in H. auto.
      + rewrite Hv in H. lia. }
    rewrite cnt_allax_cat in H. lia.
  - assert (H1 : cnt m v (allax r A) <= cnt m v (seq 0 (length m))).
    { apply cnt_nodup_incl; auto. intros a Ha. apply in_seq. specialize (HA a Ha). lia. }
    assert (H2 : cnt m v (seq 0 (length m)) <= cnt m v (allax r D ++ allax r E)).
    { apply cnt_nodup_incl_v; [apply seq_NoDup|]. intros a Ha Hv.
      destruct (memb a (allax r D)) eqn:E1; [apply memb_spec in E1; apply in_or_app; auto|].
      destruct (memb a (allax r E)) eqn:E2; [apply memb_spec in E2; apply in_or_app; auto|].
      exfalso. assert (existsb (fun a => (asize m a =? v) && negb (memb a (allax r D)) && negb (memb a (allax r E))) (seq 0 (length m)) = true).
      { apply existsb_exists. exists a. split; auto. rewrite E1, E2, Hv, Nat.eqb_refl. auto. }
      congruence. }
    rewrite cnt_app in H2. lia.
Qed.

(** ** The problem's own facts *)

Lemma used_src : forall src, used src = allax (length src) (sax src).
Proof. intros. rewrite <- (tyof_self src) at 1. apply used_tyof. Qed.

Lemma wf_range : forall m t a, wf m t -> In a (allax (length t) (sax t)) -> a < length m.
Proof.
  intros m t a [_ [HF _]] Ha. apply in_allax in Ha. destruct Ha as [d [Hd Ha]].
  rewrite Forall_forall in HF. apply (HF (nth d t dd0)); auto. apply nth_In; auto.
Qed.

Lemma valid_len : forall m src dst, valid_problem m src dst -> length dst = length src.
Proof. intros m src dst [_ [_ H]]. rewrite <- (map_length gsize src), H, map_length. auto. Qed.

Lemma valid_dst_tyof : forall m src dst, valid_problem m src dst -> tyof src (sax dst) = dst.
Proof.
  intros m src dst Hv. rewrite <- (tyof_self dst) at 2. unfold tyof. rewrite (valid_len m src dst Hv).
  apply map_ext. intros d. f_equal. apply gs_map. destruct Hv as [_ [_ H]]. auto.
Qed.

Lemma valid_facts : forall m src dst, valid_problem m src dst ->
  NoDup (allax (length src) (sax src)) /\ NoDup (allax (length src) (sax dst)) /\
  (forall a, In a (allax (length src) (sax src)) -> a < length m) /\
  (forall a, In a (allax (length src) (sax dst)) -> a < length m).
Proof.
  intros m src dst Hv. pose proof (valid_len m src dst Hv) as Hl.
  destruct Hv as [Hs [Hd _]]. split; [|split; [|split]].
  - rewrite <- used_src. apply Hs.
  - rewrite <- Hl, <- used_src. apply Hd.
  - intros. apply (wf_range m src); auto.
  - intros. rewrite <- Hl in *. apply (wf_range m dst); auto.
Qed.

(** ** The chains of the canonical construction *)

Lemma slices_chain : forall m src dst Sa X, valid_problem m src dst -> cap_ok m src dst ->
  good m src dst (fun d => Sa d ++ X d) ->
  forall k j, j + k = length src ->
  chain m (tyof src (fun d => if d <? j then Sa d ++ X d else Sa d))
    (flat_map (fun d => match X d with [] => [] | xs => [DynSlice d xs] end) (seq j k))
    (tyof src (fun d => Sa d ++ X d)).
Proof.
  intros m src dst Sa X Hv Hc Hg k. induction k as [|k IH]; intros j Hj.
  - simpl. rewrite (tyof_ext src _ (fun d => Sa d ++ X d)); [constructor|].
    intros d Hd. destruct (Nat.ltb_spec d j); [auto|lia].
  - cbn [seq flat_map].
    assert (Hnext : good m src dst (fun d => if d <? S j then Sa d ++ X d else Sa d)).
    { apply (good_prefix _ _ _ _ _ Hg). intros d Hd. destruct (d <? S j).
      - exists []. rewrite app_nil_r. auto.
      - exists (X d). auto. }
    assert (Heq : feq (length src) (upd (fun d => if d <? j then Sa d ++ X d else Sa d) j
                                       ((if j <? j then Sa j ++ X j else Sa j) ++ X j))
                                  (fun d => if d <? S j then Sa d ++ X d else Sa d)).
    { intros d Hd. rewrite Nat.ltb_irrefl. unfold upd. destruct (Nat.eqb_spec d j).
      - subst. rewrite (proj2 (Nat.ltb_lt j (S j))) by lia. auto.
      - destruct (Nat.ltb_spec d j), (Nat.ltb_spec d (S j)); auto; lia. }
    destruct (X j) as [|x xs] eqn:Ej.
    + simpl. rewrite (tyof_ext src _ (fun d => if d <? S j then Sa d ++ X d else Sa d)).
      * apply IH. lia.
      * intros d Hd. destruct (Nat.eqb_spec d j).
        -- subst. rewrite Nat.ltb_irrefl, (proj2 (Nat.ltb_lt j (S j))) by lia. rewrite Ej, app_nil_r. auto.
        -- destruct (Nat.ltb_spec d j), (Nat.ltb_spec d (S j)); auto; lia.
    + simpl. rewrite <- Ej in Heq |- *. econstructor.
      * apply step_slice_tyof with (dst := dst); auto; [|lia|congruence|].
        -- apply (good_ext _ _ _ _ _ (fun d Hd => eq_sym (Heq d Hd))). auto.
        -- intros a Ha Hin. apply in_allax in Hin. destruct Hin as [d' [Hd' Hin]].
           destruct Hg as [Hn _].
           assert (HaA : In a (Sa j ++ X j)) by (apply in_or_app; auto).
           destruct (Nat.ltb_spec d' j).
           ++ assert (j = d') by (apply (allax_nodup_disj _ _ j d' a Hn); auto; lia). lia.
           ++ assert (HaS : In a (Sa d' ++ X d')) by (apply in_or_app; auto).
              assert (j = d') by (apply (allax_nodup_disj _ _ j d' a Hn); auto; lia). subst d'.
              assert (Hnd := allax_nodup_dim _ _ j Hn ltac:(lia)). simpl in Hnd.
              apply (NoDup_app_disj _ _ _ a Hnd Hin Ha).
      * cbv beta. rewrite (tyof_ext src _ _ Heq). apply IH. lia.
Qed.

Lemma gathers_chain : forall m src D E,
  forall k j, j + k = length src ->
  chain m (tyof src (fun d => if d <? j then D d else D d ++ E d))
    (flat_map (fun d => match E d with [] => [] | xs => [AllGather d xs] end) (seq j k))
    (tyof src D).
Proof.
  intros m src D E k. induction k as [|k IH]; intros j Hj.
  - simpl. rewrite (tyof_ext src _ D); [constructor|].
    intros d Hd. destruct (Nat.ltb_spec d j); [auto|lia].
  - cbn [seq flat_map].
    assert (Heq : feq (length src) (upd (fun d => if d <? j then D d else D d ++ E d) j (D j))
                                  (fun d => if d <? S j then D d else D d ++ E d)).
    { intros d Hd. unfold upd. destruct (Nat.eqb_spec d j).
      - subst. rewrite (proj2 (Nat.ltb_lt j (S j))) by lia. auto.
      - destruct (Nat.ltb_spec d j), (Nat.ltb_spec d (S j)); auto; lia. }
    destruct (E j) as [|x xs] eqn:Ej.
    + simpl. rewrite (tyof_ext src _ (fun d => if d <? S j then D d else D d ++ E d)).
      * apply IH. lia.
      * intros d Hd. destruct (Nat.eqb_spec d j).
        -- subst. rewrite Nat.ltb_irrefl, (proj2 (Nat.ltb_lt j (S j))) by lia. rewrite Ej, app_nil_r. auto.
        -- destruct (Nat.ltb_spec d j), (Nat.ltb_spec d (S j)); auto; lia.
    + simpl. econstructor.
      * apply step_gather_tyof with (P := D j); [lia| |discriminate].
        rewrite Nat.ltb_irrefl, Ej. auto.
      * rewrite (tyof_ext src _ _ Heq). apply IH. lia.
Qed.

(** ** The moves *)

Definition mi (m : mesh) (src dst : atype) (T C : nat -> list nat) : Prop :=
  good m src dst C /\ forall v, cnt m v (allax (length src) C) = cnt m v (allax (length src) T).

Definition mu (m : mesh) (r : nat) (T C : nat -> list nat) : nat :=
  fold_right plus 0 (map (fun v => fold_right plus 0 (map (fun e => cnt m v (T e) - cnt m v (C e)) (seq 0 r))) m).

Lemma mi_ext : forall m src dst T C C', feq (length src) C C' -> mi m src dst T C -> mi m src dst T C'.
Proof.
  intros m src dst T C C' H [Hg Hs]. split; [eapply good_ext; eauto|]. intros v.
  rewrite <- (allax_ext _ _ _ H). auto.
Qed.

Lemma mu_ext : forall m r T C C', feq r C C' -> mu m r T C = mu m r T C'.
Proof.
  intros. unfold mu. f_equal. apply map_ext. intros v. f_equal. apply map_ext_in.
  intros e He. apply in_seq in He. rewrite H by lia. auto.
Qed.

Lemma find_move_some : forall m r C T d e a, find_move m r C T = Some (d, e, a) ->
  d < r /\ e < r /\ d <> e /\ In a (C d) /\
  cnt m (asize m a) (T d) < cnt m (asize m a) (C d) /\ cnt m (asize m a) (C e) < cnt m (asize m a) (T e).
Proof.
  intros m r C T d e a H. unfold find_move in H.
  apply first_some_some in H. destruct H as [d0 [Hd0 H]].
  apply first_some_some in H. destruct H as [a0 [Ha0 H]].
  destruct (Nat.ltb_spec (cnt m (asize m a0) (T d0)) (cnt m (asize m a0) (C d0))); [|discriminate].
  destruct (receiver_for m r C T d0 (asize m a0)) as [e0|] eqn:Er; [|discriminate].
  simpl in H. inversion H; subst. unfold receiver_for in Er. apply find_some in Er.
  destruct Er as [He Hp]. rewrite andb_true_iff, negb_true_iff, Nat.eqb_neq, Nat.ltb_lt in Hp.
  apply in_seq in Hd0. apply in_seq in He. apply in_rev in Ha0. repeat split; try lia; tauto.
Qed.

Lemma find_move_none : forall m src dst T C, mi m src dst T C ->
  find_move m (length src) C T = None ->
  forall d v, d < length src -> cnt m v (C d) = cnt m v (T d).
Proof.
  intros m src dst T C [_ Hs] H. set (r := length src) in *.
  assert (Hnr : forall e v, e < r -> cnt m v (T e) <= cnt m v (C e)).
  { intros e v He. destruct (Nat.le_gt_cases (cnt m v (T e)) (cnt m v (C e))) as [|Hlt]; auto. exfalso.
    destruct (existsb (fun d => cnt m v (T d) <? cnt m v (C d)) (seq 0 r)) eqn:Ex.
    - apply existsb_exists in Ex. destruct Ex as [d [Hd Hdl]]. apply Nat.ltb_lt in Hdl.
      apply in_seq in Hd.
      assert (Hp : 0 < cnt m v (C d)) by lia. destruct (cnt_pos_in _ _ _ Hp) as [a [Ha Hv]].
      unfold find_move in H. assert (Hf := first_some_none _ _ H d ltac:(apply in_seq; lia)).
      simpl in Hf. assert (Hf2 := first_some_none _ _ Hf a ltac:(apply in_rev in Ha; auto)).
      simpl in Hf2. subst v. rewrite (proj2 (Nat.ltb_lt _ _) Hdl) in Hf2.
      destruct (receiver_for m r C T d (asize m a)) eqn:Er; [discriminate|].
      unfold receiver_for in Er. assert (Hn := find_none _ _ Er e ltac:(apply in_seq; lia)).
      simpl in Hn. rewrite andb_false_iff, negb_false_iff, Nat.eqb_eq, Nat.ltb_ge in Hn.
      destruct Hn; [subst; lia|lia].
    - assert (forall d, d < r -> cnt m v (C d) <= cnt m v (T d)).
      { intros d Hd. destruct (Nat.le_gt_cases (cnt m v (C d)) (cnt m v (T d))) as [|Hlt']; auto.
        exfalso. assert (existsb (fun d => cnt m v (T d) <? cnt m v (C d)) (seq 0 r) = true).
        { apply existsb_exists. exists d. split; [apply in_seq; lia|apply Nat.ltb_lt; auto]. }
        congruence. }
      assert (cnt m v (allax r C) < cnt m v (allax r T)) by (apply cnt_allax_lt; eauto).
      specialize (Hs v). lia. }
  intros d v Hd. pose proof (Hnr d v Hd).
  destruct (Nat.le_gt_cases (cnt m v (C d)) (cnt m v (T d))) as [|Hlt]; [lia|].
  assert (cnt m v (allax r T) < cnt m v (allax r C)) by (apply cnt_allax_lt; eauto).
  specialize (Hs v). lia.
Qed.

Lemma move_step : forall m src dst T C d e a, valid_problem m src dst -> cap_ok m src dst ->
  good m src dst T -> mi m src dst T C -> find_move m (length src) C T = Some (d, e, a) ->
  let Cd' := remove Nat.eq_dec a (C d) in
  let pre := if nat_list_eqb (C d) (Cd' ++ [a]) then []
             else [AllPermute (tyof src (upd C d (Cd' ++ [a])))] in
  let C2 := upd (upd C d Cd') e (C e ++ [a]) in
  chain m (tyof src C) (pre ++ [AllToAll d e [a]]) (tyof src C2) /\ mi m src dst T C2 /\
  mu m (length src) T C2 < mu m (length src) T C /\ Forall (fun c => is_mid c = true) (pre ++ [AllToAll d e [a]]).
Proof.
  intros m src dst T C d e a Hv Hc HT [Hg Hs] Hf Cd' pre C2.
  set (r := length src) in *.
  destruct (find_move_some _ _ _ _ _ _ _ Hf) as [Hd [He [Hde [Ha [Hdon Hrec]]]]].
  set (v := asize m a) in *.
  pose proof Hg as [Hn [Hr Hcg]].
  assert (HCd : NoDup (C d)) by (eapply allax_nodup_dim; eauto).
  assert (Hperm : Permutation (C d) (Cd' ++ [a])) by (apply remove_perm; auto).
  set (C1 := upd C d (Cd' ++ [a])).
  assert (Hp1 : Permutation (allax r C1) (allax r C)) by (apply allax_upd_perm'; auto; symmetry; auto).
  assert (Hcnt1 : forall d' v', d' < r -> cnt m v' (C d') = cnt m v' (C1 d')).
  { intros d' v' Hd'. unfold C1, upd. destruct (Nat.eqb_spec d' d); subst; auto. apply cnt_perm; auto. }
  assert (Hg1 : good m src dst C1).
  { split; [|split].
    - eapply Permutation_NoDup; [symmetry; eauto|auto].
    - intros b Hb. apply Hr. eapply Permutation_in; eauto.
    - intros d' v' Hd'. rewrite <- Hcnt1 by auto. auto. }
  (* the new dimension function *)
  assert (Hma : a < length m) by (apply Hr, in_allax; eauto).
  assert (HcntCd : forall v', cnt m v' (C d) = cnt m v' Cd' + cnt m v' [a])
    by (intros; rewrite <- cnt_app; apply cnt_perm; auto).
  assert (Hp2 : Permutation (allax r C2) (allax r C)).
  { unfold C2. replace (C e) with (upd C d Cd' e) by (rewrite upd_neq; auto).
    rewrite (allax_upd_app r (upd C d Cd') e [a] He).
    rewrite (allax_upd_perm r C d Cd' Hd).
    rewrite (allax_perm_split r C d Hd).
    simpl. rewrite Hperm. rewrite <- app_assoc. simpl. apply Permutation_middle. }
  assert (Hg2 : good m src dst C2).
  { split; [|split].
    - eapply Permutation_NoDup; [symmetry; eauto|auto].
    - intros b Hb. apply Hr. eapply Permutation_in; eauto.
    - intros x v' Hx. unfold C2, upd. destruct (Nat.eqb_spec x e); [subst x|destruct (Nat.eqb_spec x d)].
      + rewrite cnt_app, cnt_single. destruct (Nat.eqb_spec (asize m a) v').
        * subst v'. destruct HT as [_ [_ HTc]]. specialize (HTc e v He). fold v in Hrec |- *. lia.
        * specialize (Hcg e v' He). lia.
      + subst x. specialize (Hcg d v' Hd). specialize (HcntCd v'). lia.
      + auto. }
  split; [|split; [|split]].
  - apply chain_app with (t1 := tyof src C1).
    + unfold pre. destruct (nat_list_eqb (C d) (Cd' ++ [a])) eqn:Eq.
      * apply nat_list_eqb_spec in Eq. rewrite (tyof_ext src C1 C); [constructor|].
        intros x Hx. unfold C1, upd. destruct (Nat.eqb_spec x d); subst; auto.
      * econstructor; [|constructor]. apply step_permute_tyof with (dst := dst); auto.
    + econstructor; [|constructor].
      replace (tyof src C2) with (tyof src (upd (upd C1 d Cd') e (C1 e ++ [a]))).
      * apply step_a2a_tyof with (dst := dst); auto.
        -- apply (good_ext m src dst C2); auto. intros x Hx. unfold C2, C1, upd.
           destruct (Nat.eqb_spec x e), (Nat.eqb_spec x d), (Nat.eqb_spec e d); subst; auto; congruence.
        -- unfold C1. apply upd_eq.
        -- discriminate.
      * apply tyof_ext. intros x Hx. unfold C2, C1, upd.
        destruct (Nat.eqb_spec x e), (Nat.eqb_spec x d), (Nat.eqb_spec e d); subst; auto; congruence.
  - split; auto. intros v'. rewrite (cnt_perm _ _ _ _ Hp2). auto.
  - unfold mu. apply sum_lt.
    + intros v' _. apply sum_le. intros x Hx. apply in_seq in Hx.
      unfold C2, upd. destruct (Nat.eqb_spec x e); [subst x|destruct (Nat.eqb_spec x d)].
      * rewrite cnt_app. lia.
      * subst x. specialize (HcntCd v'). rewrite cnt_single in HcntCd.
        destruct (Nat.eqb_spec (asize m a) v'); [subst v'; unfold v in *; lia|lia].
      * lia.
    + exists v. split; [unfold v, asize; apply nth_In; auto|].
      apply sum_lt.
      * intros x Hx. apply in_seq in Hx.
        unfold C2, upd. destruct (Nat.eqb_spec x e); [subst x|destruct (Nat.eqb_spec x d)].
        -- rewrite cnt_app. lia.
        -- subst x. specialize (HcntCd v). rewrite cnt_single in HcntCd. unfold v in *. rewrite Nat.eqb_refl in HcntCd. lia.
        -- lia.
      * exists e. split; [apply in_seq; lia|]. unfold C2. rewrite upd_eq, cnt_app, cnt_single.
        fold v. rewrite Nat.eqb_refl. lia.
  - apply Forall_app. split.
    + unfold pre. destruct (nat_list_eqb (C d) (Cd' ++ [a])); auto.
    + auto.
Qed.

Lemma app_cons_assoc : forall A (l1 l2 : list A) x, l1 ++ x :: l2 = (l1 ++ [x]) ++ l2.
Proof. intros. rewrite <- app_assoc. reflexivity. Qed.

Lemma move_loop_spec : forall m src dst T, valid_problem m src dst -> cap_ok m src dst ->
  good m src dst T -> forall fuel C, mi m src dst T C -> mu m (length src) T C < fuel ->
  chain m (tyof src C) (fst (move_loop m src T fuel C)) (tyof src (snd (move_loop m src T fuel C))) /\
  mi m src dst T (snd (move_loop m src T fuel C)) /\
  (forall d v, d < length src -> cnt m v (snd (move_loop m src T fuel C) d) = cnt m v (T d)) /\
  Forall (fun c => is_mid c = true) (fst (move_loop m src T fuel C)).
Proof.
  intros m src dst T Hv Hc HT fuel. induction fuel as [|f IH]; intros C Hmi Hmu; [lia|].
  simpl. destruct (find_move m (length src) C T) as [[[d e] a]|] eqn:Ef.
  - destruct (move_step m src dst T C d e a Hv Hc HT Hmi Ef) as [Hch [Hmi2 [Hmu2 Hmid]]].
    set (C2 := upd (upd C d (remove Nat.eq_dec a (C d))) e (C e ++ [a])) in *.
    destruct (IH C2 Hmi2 ltac:(lia)) as [Hch' [Hmi' [Hcnt' Hmid']]].
    destruct (move_loop m src T f C2) as [p Cf] eqn:Em. simpl in *.
    split; [|split; [|split]]; auto.
    + rewrite app_cons_assoc. eapply chain_app; eauto.
    + rewrite app_cons_assoc. apply Forall_app. auto.
  - simpl. split; [constructor|]. split; auto. split; auto.
    eapply find_move_none; eauto.
Qed.


Lemma fold_plus_app : forall l1 l2, fold_right plus 0 (l1 ++ l2) = fold_right plus 0 l1 + fold_right plus 0 l2.
Proof. induction l1; simpl; intros; auto. rewrite IHl1. lia. Qed.

Lemma cnt_allax_sum : forall m v r f,
  cnt m v (allax r f) = fold_right plus 0 (map (fun e => cnt m v (f e)) (seq 0 r)).
Proof.
  induction r as [|r IH]; intros f; auto. rewrite allax_S, seq_S, map_app, cnt_app, IH.
  rewrite fold_plus_app. simpl. lia.
Qed.

Lemma mu_bound : forall m src dst T C, good m src dst T ->
  mu m (length src) T C <= length m * length m.
Proof.
  intros m src dst T C [Hn [Hr _]]. unfold mu. apply sum_bound. intros v _.
  apply Nat.le_trans with (cnt m v (allax (length src) T)).
  - rewrite cnt_allax_sum. apply sum_le. intros. lia.
  - apply Nat.le_trans with (length (allax (length src) T)); [apply cnt_le_length|].
    apply nodup_in_range_length; auto.
Qed.

(** ** Local sizes along a plan in normal form *)

Lemma size_set_nth_le : forall m t d D D', nth_error t d = Some D -> 0 < lsize m D ->
  lsize m D' <= lsize m D -> size m (set_nth t d D') <= size m t.
Proof.
  intros m t d D D' Hd Hp Hle. unfold size. rewrite map_set_nth.
  assert (E := prod_set_nth (map (lsize m) t) d (lsize m D') (lsize m D)).
  rewrite nth_error_map, Hd in E. specialize (E eq_refl).
  apply (Nat.mul_le_mono_pos_r _ _ (lsize m D)); auto. rewrite E. nia.
Qed.

Lemma step_size_slice : forall m t d xs t', wf m t -> step m t (DynSlice d xs) t' -> size m t' <= size m t.
Proof.
  intros m t d xs t' Hw Hs. inversion Hs as [|? ? D Hd Hne Hr Hnd Hu Hdiv| |]; subst.
  pose proof (wf_nth m t d D Hw Hd) as HD. pose proof Hw as [Hm _].
  apply (size_set_nth_le m t d D); auto.
  - apply lsize_pos; auto.
  - unfold lsize. simpl. rewrite nprod_app.
    destruct HD as [_ [Hax _]].
    assert (0 < nprod m (axes D)) by (apply nprod_pos; auto).
    assert (0 < nprod m xs) by (apply nprod_pos; auto).
    apply Nat.div_le_compat_l. nia.
Qed.

Lemma step_size_mid : forall m t c t', wf m t -> step m t c t' -> is_mid c = true -> size m t' = size m t.
Proof.
  intros m t c t' Hw Hs Hc. destruct c; try discriminate.
  - inversion Hs as [| |? ? ? P g E Hde Hd He Hne Hdiv|]; subst.
    pose proof Hw as [Hm _].
    pose proof (wf_nth m t d _ Hw Hd) as HD. pose proof (wf_nth m t e E Hw He) as HE.
    assert (HLd := lsize_mul m _ Hm HD). assert (HpD := lsize_pos m _ Hm HD).
    assert (HLe := lsize_mul m _ Hm HE). assert (HpE := lsize_pos m _ Hm HE).
    simpl in HLd. rewrite nprod_app in HLd.
    destruct HD as [_ [HaxD _]]. simpl in HaxD. destruct HE as [_ [HaxE _]].
    assert (HP : 0 < nprod m P) by (apply nprod_pos; auto; intros; apply HaxD, in_or_app; auto).
    assert (Hx : 0 < nprod m xs) by (apply nprod_pos; auto; intros; apply HaxD, in_or_app; auto).
    assert (HEp : 0 < nprod m (axes E)) by (apply nprod_pos; auto).
    set (Ld := lsize m (mkdim (P ++ xs) g)) in *. set (Le := lsize m E) in *.
    destruct Hdiv as [q Hq].
    assert (H1 : lsize m (mkdim P g) = Ld * nprod m xs).
    { unfold lsize at 1. simpl. rewrite <- HLd.
      replace (Ld * (nprod m P * nprod m xs)) with (Ld * nprod m xs * nprod m P) by ring.
      apply Nat.div_mul. lia. }
    assert (H2 : lsize m (mkdim (axes E ++ xs) (gsize E)) = q).
    { unfold lsize. simpl. rewrite nprod_app, <- HLe, Hq.
      replace (q * nprod m xs * nprod m (axes E)) with (q * (nprod m (axes E) * nprod m xs)) by ring.
      apply Nat.div_mul. nia. }
    unfold size. rewrite !map_set_nth.
    assert (E1 := prod_set_nth (map (lsize m) t) d (lsize m (mkdim P g)) Ld).
    rewrite nth_error_map, Hd in E1. specialize (E1 eq_refl).
    assert (E2 := prod_set_nth (set_nth (map (lsize m) t) d (lsize m (mkdim P g))) e
                   (lsize m (mkdim (axes E ++ xs) (gsize E))) Le).
    rewrite nth_error_set_nth_neq, nth_error_map, He in E2 by auto. specialize (E2 eq_refl).
    rewrite H1 in E1, E2 |- *. rewrite H2 in E2 |- *. rewrite Hq in E2.
    set (L := map (lsize m) t) in *.
    set (Y := prod (set_nth L d (Ld * nprod m xs))) in *.
    set (X := prod (set_nth (set_nth L d (Ld * nprod m xs)) e q)) in *.
    assert (0 < q) by (destruct q; simpl in Hq; lia).
    apply (Nat.mul_cancel_r _ _ (q * nprod m xs * Ld)); [nia|].
    replace (X * (q * nprod m xs * Ld)) with ((X * (q * nprod m xs)) * Ld) by ring.
    rewrite E2. replace (Y * q * Ld) with ((Y * Ld) * q) by ring. rewrite E1. ring.
  - inversion Hs as [| | |? Hw' Hg Hl]; subst. unfold size. rewrite Hl. auto.
Qed.

Lemma step_size_gather : forall m t d xs t', wf m t -> step m t (AllGather d xs) t' -> size m t <= size m t'.
Proof.
  intros m t d xs t' Hw Hs. inversion Hs as [? ? P g Hd Hne| | |]; subst.
  rewrite (size_gather m t d P xs g Hw Hd).
  assert (0 < nprod m xs).
  { apply nprod_pos; [apply Hw|]. intros a Ha.
    pose proof (wf_nth m t d _ Hw Hd) as [_ [Hax _]]. apply Hax. simpl. apply in_or_app; auto. }
  nia.
Qed.

Lemma trace_last_cons : forall m t c t1 p ts rs, step m t c t1 -> trace m t1 p ts rs ->
  last (t :: ts) t = last ts t1.
Proof.
  intros. destruct (trace_hd _ _ _ _ _ H0) as [ts' ->].
  rewrite last_cons_default by discriminate. apply last_default_irrel. discriminate.
Qed.

Lemma sizes_gathers : forall m t p ts rs, trace m t p ts rs -> wf m t ->
  forallb is_gather p = true -> forall t', In t' ts -> size m t' <= size m (last ts t).
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros Hw Hg t' Hin.
  - destruct Hin as [<-|[]]. auto.
  - simpl in Hg. apply andb_true_iff in Hg as [Hc Hp].
    rewrite (trace_last_cons m t c t1 p ts rs Hs Ht).
    assert (Hw1 : wf m t1) by (eapply step_wf; eauto).
    destruct Hin as [<-|Hin]; [|apply IH; auto].
    destruct c; try discriminate.
    pose proof (step_size_gather m t d xs t1 Hw Hs).
    destruct (trace_hd _ _ _ _ _ Ht) as [ts' ->].
    pose proof (IH Hw1 Hp t1 (or_introl eq_refl)). lia.
Qed.

Lemma sizes_mid : forall m t p ts rs, trace m t p ts rs -> wf m t ->
  nf_mid p = true -> forall t', In t' ts -> size m t' <= Nat.max (size m t) (size m (last ts t)).
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros Hw Hn t' Hin.
  - destruct Hin as [<-|[]]. lia.
  - assert (Hl := trace_last_cons m t c t1 p ts rs Hs Ht).
    assert (Hw1 : wf m t1) by (eapply step_wf; eauto).
    simpl in Hn. destruct (is_mid c) eqn:Ec.
    + rewrite Hl. destruct Hin as [<-|Hin]; [lia|].
      rewrite <- (step_size_mid m t c t1 Hw Hs Ec). apply IH; auto.
    + assert (Htr : trace m t (c :: p) (t :: ts) (recv m t c t1 :: rs)) by (econstructor; eauto).
      pose proof (sizes_gathers m t (c :: p) (t :: ts) _ Htr Hw Hn t' Hin). lia.
Qed.

Lemma sizes_nf : forall m t p ts rs, trace m t p ts rs -> wf m t ->
  nf_slices p = true -> forall t', In t' ts -> size m t' <= Nat.max (size m t) (size m (last ts t)).
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros Hw Hn t' Hin.
  - destruct Hin as [<-|[]]. lia.
  - assert (Hl := trace_last_cons m t c t1 p ts rs Hs Ht).
    assert (Hw1 : wf m t1) by (eapply step_wf; eauto).
    simpl in Hn. destruct (is_slice c) eqn:Ec.
    + rewrite Hl. destruct Hin as [<-|Hin]; [lia|].
      destruct c; try discriminate. pose proof (step_size_slice m t d xs t1 Hw Hs).
      pose proof (IH Hw1 Hn t' Hin). lia.
    + assert (Htr : trace m t (c :: p) (t :: ts) (recv m t c t1 :: rs)) by (econstructor; eauto).
      apply (sizes_mid m t (c :: p) (t :: ts) _ Htr Hw Hn t' Hin).
Qed.

Lemma peak_of_le : forall m ts k, (forall t, In t ts -> size m t <= k) -> peak_of m ts <= k.
Proof.
  induction ts as [|t ts IH]; simpl; intros k H; [lia|].
  assert (size m t <= k) by auto. assert (peak_of m ts <= k) by auto. lia.
Qed.

(** A plan in normal form never holds more than the larger of its ends. *)
Theorem normal_form_peak : forall m src dst p r, check m src dst p = Ok r -> nf_slices p = true ->
  peak r <= Nat.max (size m src) (size m dst).
Proof.
  intros m src dst p r Hc Hn. apply check_ok_iff in Hc.
  destruct Hc as [[Hs _] [Ht [Hl Hp]]]. rewrite Hp. apply peak_of_le.
  intros t Hin. rewrite <- Hl. eapply sizes_nf; eauto.
Qed.

(** ** The canonical plan is accepted *)

Lemma nf_build : forall p1 p2 p3, Forall (fun c => is_slice c = true) p1 ->
  Forall (fun c => is_mid c = true) p2 -> Forall (fun c => is_gather c = true) p3 ->
  nf_slices (p1 ++ p2 ++ p3) = true.
Proof.
  intros p1 p2 p3 H1 H2 H3. induction H1 as [|c p1 Hc H1 IH]; simpl.
  - destruct H2 as [|c p2 Hc H2].
    + simpl. destruct H3 as [|c p3 Hc H3]; simpl; auto.
      destruct c; try discriminate; simpl; apply forallb_forall; rewrite Forall_forall in H3; auto.
    + simpl. destruct c; try discriminate; simpl.
      * clear Hc. induction H2 as [|c p2 Hc H2 IH]; simpl.
        -- destruct H3 as [|c p3 Hc H3]; simpl; auto.
           destruct c; try discriminate; simpl; apply forallb_forall; rewrite Forall_forall in H3; auto.
        -- destruct c; try discriminate; simpl; auto.
      * clear Hc. induction H2 as [|c p2 Hc H2 IH]; simpl.
        -- destruct H3 as [|c p3 Hc H3]; simpl; auto.
           destruct c; try discriminate; simpl; apply forallb_forall; rewrite Forall_forall in H3; auto.
        -- destruct c; try discriminate; simpl; auto.
  - rewrite Hc. auto.
Qed.

(** ** The faster folds compute the same functions *)

Lemma memb_perm : forall a l l', Permutation l l' -> memb a l = memb a l'.
Proof.
  intros a l l' H. destruct (memb a l) eqn:E1, (memb a l') eqn:E2; auto.
  - apply memb_spec in E1. apply (Permutation_in _ H), memb_spec in E1. congruence.
  - apply memb_spec in E2. apply (Permutation_in _ (Permutation_sym H)), memb_spec in E2. congruence.
Qed.

Lemma fold_grow_f : forall r ok okf ps X AX,
  (forall X AX d a, d < r -> Permutation AX (allax r X) -> okf X AX d a = ok X d a) ->
  (forall p, In p ps -> fst p < r) ->
  Permutation AX (allax r X) ->
  fst (fold_left (grow_f okf) ps (X, AX)) = fold_left (grow ok) ps X.
Proof.
  intros r ok okf ps. induction ps as [|[d a] ps IH]; intros X AX Hok Hps HP; [reflexivity|].
  assert (Hd : d < r) by (apply (Hps (d, a)); simpl; auto).
  cbn [fold_left]. unfold grow_f at 2, grow at 2. cbn [fst snd]. rewrite (Hok X AX d a Hd HP).
  destruct (ok X d a).
  - apply IH; auto. intros; apply Hps; simpl; auto.
    rewrite (allax_upd_app r X d [a] Hd). simpl. constructor. auto.
  - apply IH; auto. intros; apply Hps; simpl; auto.
Qed.

Lemma pairs_fst : forall r F l p, In p (pairs r F l) -> fst p < r.
Proof. intros r F l [d a] H. apply pairs_in in H. apply H. Qed.

Lemma slicer_f_eq : forall m r S D budget, slicer_f m r S D budget = slicer m r S D budget.
Proof.
  intros. unfold slicer_f, slicer, slice_step. cbv zeta.
  apply (fold_grow_f r); [|apply pairs_fst|rewrite allax_nil; reflexivity].
  intros X AX d a _ HP. unfold slice_ok_f, slice_ok.
  rewrite (memb_perm a AX (allax r X) HP), (cnt_perm m _ AX (allax r X) HP). reflexivity.
Qed.

Lemma extras_f_eq : forall m r D A, extras_f m r D A = extras m r D A.
Proof.
  intros. unfold extras_f, extras, extra_step.
  apply (fold_grow_f r); [|apply pairs_fst|rewrite allax_nil; reflexivity].
  intros X AX d a _ HP. unfold extra_ok_f, extra_ok.
  rewrite (memb_perm a AX (allax r X) HP), (cnt_perm m _ AX (allax r X) HP). reflexivity.
Qed.

Lemma canonical_ok : forall m src dst, valid_problem m src dst -> cap_ok m src dst ->
  chain m src (canonical m src dst) dst /\ nf_slices (canonical m src dst) = true /\
  forallb (axes_ok dst) (canonical m src dst) = true.
Proof.
  intros m src dst Hv Hc. unfold canonical, canonical_x. cbv zeta. rewrite slicer_f_eq, extras_f_eq.
  destruct (valid_facts m src dst Hv) as [HnS [HnD [HrS HrD]]].
  set (r := length src) in *. set (Sf := sax src) in *. set (Df := sax dst) in *.
  set (X := slicer m r Sf Df false).
  set (A := fun d => Sf d ++ X d).
  set (E := extras m r Df A). set (T := fun d => Df d ++ E d).
  destruct (slicer_inv m r Sf Df false HnS) as [HXn [HXD HXc]]. fold X in HXn, HXD, HXc.
  assert (HpA : Permutation (allax r A) (allax r Sf ++ allax r X)) by apply allax_cat.
  assert (HAn : NoDup (allax r A)) by (eapply Permutation_NoDup; [symmetry|]; eauto).
  assert (HAr : forall a, In a (allax r A) -> a < length m).
  { intros a Ha. apply (Permutation_in _ HpA) in Ha. apply in_app_or in Ha. destruct Ha; auto. }
  assert (HgA : good m src dst A) by (split; [|split]; auto).
  assert (Hcov : forall v, cnt m v (allax r Df) <= cnt m v (allax r A)).
  { intros v. rewrite (cnt_perm _ _ _ _ HpA), cnt_app. apply slicer_covers; auto. }
  destruct (extras_inv_holds m r Df A HnD HAr) as [HEn [HEr [HEc _]]]. fold E in HEn, HEr, HEc.
  assert (Hcomp : forall v, cnt m v (allax r Df) + cnt m v (allax r E) = cnt m v (allax r A))
    by (intros; apply extras_complete; auto).
  assert (HpT : Permutation (allax r T) (allax r Df ++ allax r E)) by apply allax_cat.
  assert (HgT : good m src dst T).
  { split; [|split].
    - eapply Permutation_NoDup; [symmetry|]; eauto.
    - intros a Ha. apply (Permutation_in _ HpT) in Ha. apply in_app_or in Ha. destruct Ha; auto.
    - intros d v Hd. specialize (HEc d v Hd). specialize (HXc d v Hd). unfold T, A, Sf, Df in *. cbv beta in *. lia. }
  assert (Hmi : mi m src dst T A).
  { split; auto. intros v. rewrite (cnt_perm _ _ _ _ HpT), cnt_app, Hcomp. auto. }
  assert (Hmu : mu m (length src) T A < length m * length m + 1) by (pose proof (mu_bound m src dst T A HgT); lia).
  destruct (move_loop_spec m src dst T Hv Hc HgT _ A Hmi Hmu) as [Hch [HmiC [HcntC HmidC]]].
  destruct (move_loop m src T (length m * length m + 1) A) as [mv C] eqn:Em.
  simpl in Hch, HmiC, HcntC, HmidC.
  assert (Hdst : tyof src Df = dst) by (apply (valid_dst_tyof m); auto).
  assert (Hused : used dst = allax r Df).
  { unfold Df, r. rewrite used_src. rewrite (valid_len m src dst Hv). auto. }
  set (pre := if atype_eqb (tyof src C) (tyof src T) then [] else [AllPermute (tyof src T)]).
  assert (Hpre : Forall (fun c => is_mid c = true) pre) by (unfold pre; destruct atype_eqb; auto).
  assert (Hsl : Forall (fun c => is_slice c = true) (slices_of r X)).
  { unfold slices_of. apply Forall_forall. intros c Hc'. apply in_flat_map in Hc'.
    destruct Hc' as [d [_ Hc']]. destruct (X d); [contradiction|]. destruct Hc' as [<-|[]]; auto. }
  assert (Hga : Forall (fun c => is_gather c = true) (gathers_of (length src) E)).
  { unfold gathers_of. apply Forall_forall. intros c Hc'. apply in_flat_map in Hc'.
    destruct Hc' as [d [_ Hc']]. destruct (E d); [contradiction|]. destruct Hc' as [<-|[]]; auto. }
  unfold finish. fold pre. split; [|split].
  - eapply chain_app.
    { assert (H0 := slices_chain m src dst Sf X Hv Hc HgA r 0 eq_refl).
      rewrite (tyof_ext src _ Sf) in H0 by (intros; simpl; auto). unfold Sf in H0 at 1.
      rewrite tyof_self in H0. exact H0. }
    eapply chain_app; [exact Hch|].
    assert (HG := gathers_chain m src Df E r 0 eq_refl).
    rewrite (tyof_ext src _ T) in HG by (intros; simpl; auto). rewrite Hdst in HG.
    unfold pre. destruct (atype_eqb (tyof src C) (tyof src T)) eqn:Eq.
    + apply atype_eqb_spec in Eq. rewrite Eq. exact HG.
    + econstructor; [|exact HG]. apply step_permute_tyof with (dst := dst); auto.
  - rewrite (app_assoc mv pre). apply nf_build; auto. apply Forall_app; auto.
  - rewrite !forallb_app. rewrite !andb_true_iff. split; [|split; [|split]].
    + apply forallb_forall. intros c Hc'. unfold slices_of in Hc'. apply in_flat_map in Hc'.
      destruct Hc' as [d [Hd Hc']]. apply in_seq in Hd.
      destruct (X d) as [|x xs] eqn:Ex; [contradiction|]. destruct Hc' as [<-|[]].
      cbn [axes_ok]. apply forallb_forall. intros a Ha. apply memb_spec. rewrite Hused.
      apply HXD. apply in_allax. exists d. rewrite Ex. split; [lia|auto].
    + apply forallb_forall. intros c Hc'. rewrite Forall_forall in HmidC.
      specialize (HmidC c Hc'). destruct c; try discriminate; auto.
    + apply forallb_forall. intros c Hc'. rewrite Forall_forall in Hpre.
      specialize (Hpre c Hc'). destruct c; try discriminate; auto.
    + apply forallb_forall. intros c Hc'. unfold gathers_of in Hc'. apply in_flat_map in Hc'.
      destruct Hc' as [d [Hd Hc']]. apply in_seq in Hd.
      destruct (E d) as [|x xs] eqn:Ex; [contradiction|]. destruct Hc' as [<-|[]].
      cbn [axes_ok]. apply forallb_forall. intros a Ha. apply negb_true_iff.
      destruct (memb a (used dst)) eqn:Hm; auto. apply memb_spec in Hm. rewrite Hused in Hm.
      exfalso. apply (NoDup_app_disj _ _ _ a HEn Hm). apply in_allax. exists d. rewrite Ex.
      split; [lia|auto].
Qed.

Lemma canonical_validates : forall m src dst, valid_problem m src dst -> cap_ok m src dst ->
  exists r, validate m src dst (canonical m src dst) = Some r.
Proof.
  intros m src dst Hv Hc. destruct (canonical_ok m src dst Hv Hc) as [Hch [Hn Ha]].
  assert (Hex : exists r, check m src dst (canonical m src dst) = Ok r)
    by (apply check_accepts_iff_chain; auto).
  destruct Hex as [r Hr]. exists r. unfold validate. rewrite Hr.
  unfold bound. rewrite (proj2 (Nat.leb_le _ _) (normal_form_peak m src dst _ r Hr Hn)). rewrite Hn, Ha. auto.
Qed.

Lemma pick_validated : forall m src dst p ps r, validate m src dst p = Some r ->
  pick m src dst (p :: ps) <> None.
Proof.
  intros m src dst p ps r Hp. unfold pick. simpl. set (G := glue m src dst).
  assert (H : forall ps acc, snd acc <> None -> snd (fold_left (pick_step m src dst G) ps acc) <> None).
  { induction ps0 as [|q ps0 IH]; simpl; intros acc Hacc; auto. apply IH.
    unfold pick_step. destruct (existsb (plan_eqb q) (fst acc)); auto. cbn [snd].
    destruct (validate m src dst q); auto. destruct (snd acc) as [[q0 k0]|]; [|congruence].
    destruct (better (cost G q r0) k0); congruence. }
  assert (Hs : snd (pick_step m src dst G ([], None) p) <> None)
    by (unfold pick_step; simpl; rewrite Hp; discriminate).
  specialize (H ps _ Hs).
  destruct (snd (fold_left _ ps _)); simpl; congruence.
Qed.

(** * Theorem 5: when the flag is guaranteed *)

(** Whenever the mesh can hold the counts ([cap_ok]), the flag is [true]. *)
Theorem synthesize_guaranteed : forall m src dst, valid_problem m src dst -> cap_ok m src dst ->
  fst (synthesize m src dst) = true.
Proof.
  intros m src dst Hv Hc. destruct (canonical_validates m src dst Hv Hc) as [r Hr].
  unfold synthesize. unfold candidates. cbv zeta.
  destruct (pick m src dst _) eqn:E; auto.
  exfalso. eapply pick_validated; [exact Hr|]. exact E.
Qed.

Lemma nprod_all2 : forall m l, (forall a, In a l -> asize m a = 2) -> nprod m l = 2 ^ length l.
Proof.
  induction l as [|a l IH]; intros H; auto. rewrite nprod_cons, H by (simpl; auto).
  rewrite IH by (intros; apply H; simpl; auto). simpl. lia.
Qed.

Lemma cnt_all2 : forall m l, (forall a, In a l -> asize m a = 2) -> cnt m 2 l = length l.
Proof.
  induction l as [|a l IH]; intros H; auto. rewrite cnt_cons, H by (simpl; auto).
  rewrite IH by (intros; apply H; simpl; auto). simpl. lia.
Qed.

Lemma pow2_divide : forall a b g, a <= b -> Nat.divide (2 ^ b) g -> Nat.divide (2 ^ a) g.
Proof.
  intros a b g Hab [k Hk]. exists (k * 2 ^ (b - a)). rewrite Hk.
  replace b with (a + (b - a)) at 1 by lia. rewrite Nat.pow_add_r. ring.
Qed.

Lemma cap_ok_pow2 : forall m src dst, valid_problem m src dst ->
  (forall a, a < length m -> asize m a = 2) -> cap_ok m src dst.
Proof.
  intros m src dst Hv H2 d L Hd HL Hr Hcnt.
  pose proof (valid_len m src dst Hv) as Hl.
  destruct Hv as [[_ [HFs _]] [[_ [HFd _]] Hg]].
  rewrite Forall_forall in HFs, HFd.
  assert (HDs := HFs (nth d src dd0) ltac:(apply nth_In; auto)).
  assert (HDd := HFd (nth d dst dd0) ltac:(apply nth_In; lia)).
  destruct HDs as [_ [HaS HdS]]. destruct HDd as [_ [HaD HdD]].
  assert (HS2 : forall a, In a (sax src d) -> asize m a = 2) by (intros; apply H2, HaS; auto).
  assert (HD2 : forall a, In a (sax dst d) -> asize m a = 2) by (intros; apply H2, HaD; auto).
  assert (HL2 : forall a, In a L -> asize m a = 2) by (intros; apply H2, Hr; auto).
  specialize (Hcnt 2). rewrite !cnt_all2 in Hcnt by auto.
  rewrite nprod_all2 by auto.
  destruct (Nat.le_ge_cases (length (sax src d)) (length (sax dst d))).
  - apply pow2_divide with (length (sax dst d)); [lia|].
    rewrite <- (nprod_all2 m (sax dst d)) by auto. rewrite (gs_map src dst Hg d). exact HdD.
  - apply pow2_divide with (length (sax src d)); [lia|].
    rewrite <- (nprod_all2 m (sax src d)) by auto. exact HdS.
Qed.

Theorem synthesize_guaranteed_pow2 : forall m src dst, valid_problem m src dst ->
  (forall a, a < length m -> asize m a = 2) -> fst (synthesize m src dst) = true.
Proof.
  intros. apply synthesize_guaranteed; auto. apply cap_ok_pow2; auto.
Qed.

(** ** Meshes of prime (or unit) axis sizes *)

Definition is_prime (p : nat) : Prop := 1 < p /\ forall k, Nat.divide k p -> k = 1 \/ k = p.

Definition cntv (v : nat) (l : list nat) : nat := length (filter (fun x => x =? v) l).

Lemma euclid : forall p a b, is_prime p -> Nat.divide p (a * b) -> Nat.divide p a \/ Nat.divide p b.
Proof.
  intros p a b [Hp Hd] H. destruct (Hd (Nat.gcd p a) (Nat.gcd_divide_l p a)) as [E|E].
  - right. apply (Nat.gauss p a b); auto.
  - left. rewrite <- E. apply Nat.gcd_divide_r.
Qed.

Lemma prime_not_div_prod : forall p l, is_prime p ->
  (forall x, In x l -> x <> p /\ (x = 1 \/ is_prime x)) -> ~ Nat.divide p (prod l).
Proof.
  intros p l Hp. induction l as [|x l IH]; intros H Hdiv.
  - unfold prod in Hdiv. simpl in Hdiv. apply Nat.divide_1_r in Hdiv. destruct Hp. lia.
  - unfold prod in Hdiv. simpl in Hdiv. destruct (euclid p x _ Hp Hdiv) as [Hx|Hx].
    + destruct (H x (or_introl eq_refl)) as [Hne [->|[Hx1 Hxd]]].
      * apply Nat.divide_1_r in Hx. destruct Hp. lia.
      * destruct (Hxd p Hx) as [E|E]; [destruct Hp; lia|congruence].
    + apply IH; auto. intros; apply H; simpl; auto.
Qed.

Lemma prod_split_p : forall p l,
  prod l = p ^ cntv p l * prod (filter (fun x => negb (x =? p)) l).
Proof.
  intros p. induction l as [|x l IH]; [reflexivity|]. unfold cntv in *. simpl.
  destruct (Nat.eqb_spec x p); simpl; unfold prod in *; simpl; rewrite IH; subst; ring.
Qed.

Lemma pow_divide_le : forall p a b, a <= b -> Nat.divide (p ^ a) (p ^ b).
Proof.
  intros p a b H. exists (p ^ (b - a)). rewrite <- Nat.pow_add_r. f_equal. lia.
Qed.

(** A product of primes and ones divides [g] when every prime occurs in it at
    most as often as in one of two lists whose products divide [g]. *)
Lemma prime_prod_divide : forall x s t g, (forall e, In e x -> e = 1 \/ is_prime e) ->
  (forall v, cntv v x <= Nat.max (cntv v s) (cntv v t)) ->
  Nat.divide (prod s) g -> Nat.divide (prod t) g -> Nat.divide (prod x) g.
Proof.
  intros x s t g. induction x as [|p x IH]; intros Hx Hc Hs Ht.
  - apply Nat.divide_1_l.
  - assert (IHx : Nat.divide (prod x) g).
    { apply IH; auto; [intros; apply Hx; simpl; auto|]. intros v. specialize (Hc v).
      unfold cntv in *. simpl in Hc. destruct (p =? v); simpl in Hc; lia. }
    unfold prod. simpl. fold (prod x).
    destruct (Hx p (or_introl eq_refl)) as [->|Hp]; [rewrite Nat.mul_1_l; auto|].
    set (c := cntv p (p :: x)).
    assert (Hpc : Nat.divide (p ^ c) g).
    { specialize (Hc p). fold c in Hc.
      destruct (Nat.le_ge_cases (cntv p s) (cntv p t)).
      - apply Nat.divide_trans with (p ^ cntv p t); [apply pow_divide_le; lia|].
        eapply Nat.divide_trans; [|exact Ht]. rewrite (prod_split_p p t). apply Nat.divide_factor_l.
      - apply Nat.divide_trans with (p ^ cntv p s); [apply pow_divide_le; lia|].
        eapply Nat.divide_trans; [|exact Hs]. rewrite (prod_split_p p s). apply Nat.divide_factor_l. }
    assert (Hc1 : c = S (cntv p x)) by (unfold c, cntv; simpl; rewrite Nat.eqb_refl; auto).
    destruct IHx as [k Hk].
    set (y := prod (filter (fun e => negb (e =? p)) x)).
    assert (Hy : ~ Nat.divide p y).
    { apply prime_not_div_prod; auto. intros e He. apply filter_In in He. destruct He as [He Hne].
      apply negb_true_iff, Nat.eqb_neq in Hne. split; auto. apply Hx. simpl; auto. }
    assert (Hxy : prod x = p ^ cntv p x * y) by apply prod_split_p.
    assert (Hpk : Nat.divide p k).
    { rewrite Hc1, Hk, Hxy in Hpc. simpl in Hpc.
      replace (k * (p ^ cntv p x * y)) with (p ^ cntv p x * (y * k)) in Hpc by ring.
      replace (p * p ^ cntv p x) with (p ^ cntv p x * p) in Hpc by ring.
      apply Nat.mul_divide_cancel_l in Hpc.
      - destruct (euclid p y k Hp Hpc); [contradiction|auto].
      - apply Nat.pow_nonzero. destruct Hp. lia. }
    destruct Hpk as [k' Hk']. exists k'. rewrite Hk, Hk'. ring.
Qed.

Lemma cnt_cntv : forall m v L, cnt m v L = cntv v (map (asize m) L).
Proof.
  intros m v L. rewrite cnt_filter. unfold cntv. induction L as [|a L IH]; simpl; auto.
  destruct (asize m a =? v); simpl; auto.
Qed.

Lemma cap_ok_prime : forall m src dst, valid_problem m src dst ->
  (forall a, a < length m -> asize m a = 1 \/ is_prime (asize m a)) -> cap_ok m src dst.
Proof.
  intros m src dst Hv Hpr d L Hd HL Hr Hcnt.
  pose proof (valid_len m src dst Hv) as Hl.
  destruct Hv as [[_ [HFs _]] [[_ [HFd _]] Hg]].
  rewrite Forall_forall in HFs, HFd.
  assert (HDs := HFs (nth d src dd0) ltac:(apply nth_In; auto)).
  assert (HDd := HFd (nth d dst dd0) ltac:(apply nth_In; lia)).
  destruct HDs as [_ [_ HdS]]. destruct HDd as [_ [_ HdD]].
  unfold nprod. apply (prime_prod_divide _ (map (asize m) (sax src d)) (map (asize m) (sax dst d))).
  - intros e He. apply in_map_iff in He. destruct He as [a [<- Ha]]. apply Hpr, Hr; auto.
  - intros v. rewrite <- !cnt_cntv. auto.
  - exact HdS.
  - rewrite (gs_map src dst Hg d). exact HdD.
Qed.

(** On a mesh refined to prime axes (axes of size 1 allowed), the flag is
    always [true]. *)
Theorem synthesize_guaranteed_prime : forall m src dst, valid_problem m src dst ->
  (forall a, a < length m -> asize m a = 1 \/ is_prime (asize m a)) -> fst (synthesize m src dst) = true.
Proof.
  intros. apply synthesize_guaranteed; auto. apply cap_ok_prime; auto.
Qed.
