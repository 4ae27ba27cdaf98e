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

    This file is the algorithm only; the validator is [Validate.v]. Proofs:
    [Synthproof.v] ([synthesize_correct] (total), [synthesize_memory],
    [synthesize_normal_form], [synthesize_gather_traffic]), [Normalform.v]
    ([gathers_traffic], [normal_form_peak]), [Constructproof.v]
    ([synthesize_guaranteed] (under [cap_ok]), [synthesize_guaranteed_pow2],
    [synthesize_guaranteed_prime]); facts about the helpers: [Synthlib.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Validate.
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
Fixpoint tyof_from (t : atype) (f : nat -> list nat) (d : nat) : atype :=
  match t with
  | [] => []
  | D :: t' => mkdim (f d) (gsize D) :: tyof_from t' f (S d)
  end.

(** [map (fun d => mkdim (f d) (gs t d)) (seq 0 (length t))] ([Synthlib.tyof_map]). *)
Definition tyof (t : atype) (f : nat -> list nat) : atype := tyof_from t f 0.

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

(** Gathers run from the last dimension to the first: the same peak and
    total traffic in any order, but a gather along an inner dimension
    interleaves blocks (a strided copy on every backend), so it is cheapest
    while the block is smallest, and the gather of dimension 0, a plain
    concatenation, comes last, on the largest block. *)
Definition gathers_of (r : nat) (E : nat -> list nat) : plan :=
  flat_map (fun d => match E d with [] => [] | xs => [AllGather d xs] end) (rev (seq 0 r)).

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
    [allax] at every pair; they visit only the pairs whose axis can pass
    the test at all ([pairs_where]: an axis the source already uses is
    never sliced, one the target uses is never an extra), and count the
    axes of a dimension and its additions without appending them. *)

(** [pairs r F l] restricted to the axes [keep] accepts, built directly. *)
Fixpoint pairs_at (keep : nat -> bool) (d : nat) (l : list nat) (rest : list (nat * nat)) : list (nat * nat) :=
  match l with
  | [] => rest
  | a :: l' => if keep a then (d, a) :: pairs_at keep d l' rest else pairs_at keep d l' rest
  end.

Fixpoint pairs_over (keep : nat -> bool) (F : nat -> list nat) (ds : list nat) (rest : list (nat * nat))
    : list (nat * nat) :=
  match ds with
  | [] => rest
  | d :: ds' => pairs_at keep d (F d) (pairs_over keep F ds' rest)
  end.

Definition pairs_where (keep : nat -> bool) (r : nat) (F : nat -> list nat) (l : list nat) : list (nat * nat) :=
  let l' := filter keep l in
  pairs_over keep F (seq 0 r) (pairs_over (fun _ => true) (fun _ => l') (seq 0 r) []).

Definition grow_f (ok : (nat -> list nat) -> list nat -> nat -> nat -> bool)
    (st : (nat -> list nat) * list nat) (p : nat * nat) : (nat -> list nat) * list nat :=
  if ok (fst st) (snd st) (fst p) (snd p)
  then (upd (fst st) (fst p) (fst st (fst p) ++ [snd p]), snd p :: snd st) else st.

Definition slice_ok_f (m : mesh) (AS AD : list nat) (S D : nat -> list nat) (budget : bool)
    (X : nat -> list nat) (AX : list nat) (d a : nat) : bool :=
  let v := asize m a in
  negb (memb a AS) && negb (memb a AX) &&
  (cnt m v (S d) + cnt m v (X d) <? cnt m v (D d)) &&
  (negb budget || (cnt m v AS + cnt m v AX <? cnt m v AD)).

Definition slicer_f (m : mesh) (r : nat) (S D : nat -> list nat) (budget : bool) : nat -> list nat :=
  let AS := allax r S in
  let AD := allax r D in
  fst (fold_left (grow_f (slice_ok_f m AS AD S D budget))
                 (pairs_where (fun a => negb (memb a AS)) r D AD) (fun _ => [], [])).

Definition slicer_div_f (m : mesh) (r : nat) (S D : nat -> list nat) (g : nat -> nat) : nat -> list nat :=
  let AS := allax r S in
  let AD := allax r D in
  fst (fold_left (grow_f (fun X AX d a =>
    slice_ok_f m AS AD S D false X AX d a ||
    (negb (memb a AS) && negb (memb a AX) && memb a (D d) &&
     (g d mod nprod m (S d ++ X d ++ [a]) =? 0))))
    (pairs_where (fun a => negb (memb a AS)) r D AD) (fun _ => [], [])).

Definition extra_ok_f (m : mesh) (AD AA : list nat) (D A : nat -> list nat)
    (E : nat -> list nat) (AE : list nat) (d a : nat) : bool :=
  let v := asize m a in
  negb (memb a AD) && negb (memb a AE) &&
  (cnt m v (D d) + cnt m v (E d) <? cnt m v (A d)) &&
  (cnt m v AD + cnt m v AE <? cnt m v AA).

(** [D] and [A] are read once per dimension into lists, looked up there
    below [r] (they are functions that may rebuild their lists on every
    call). *)
Definition extras_f (m : mesh) (r : nat) (D A : nat -> list nat) : nat -> list nat :=
  let DL := map D (seq 0 r) in
  let AL := map A (seq 0 r) in
  let D' := fun d => nth d DL [] in
  let A' := fun d => nth d AL [] in
  let AD := concat DL in
  fst (fold_left (grow_f (extra_ok_f m AD (concat AL) D' A'))
                 (pairs_where (fun a => negb (memb a AD)) r A' (seq 0 (length m))) (fun _ => [], [])).

(** The first [r] dimensions of [C] and [T] hold the same axes. *)
Definition same_axes (r : nat) (C T : nat -> list nat) : bool :=
  forallb (fun d => nat_list_eqb (C d) (T d)) (seq 0 r).

(** The end of every plan: a permute to the pre-gather type [T] unless
    already there ([Synthlib.same_axes_tyof]: [tyof src C = tyof src T]),
    then one gather per dimension. *)
Definition finish (src : atype) (C T E : nat -> list nat) : plan :=
  (if same_axes (length src) C T then [] else [AllPermute (tyof src T)]) ++
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
    let Cd := C d in
    let Td := T d in
    first_some (fun a =>
      let v := asize m a in
      if cnt m v Td <? cnt m v Cd
      then option_map (fun e => (d, e, a)) (receiver_for m r C T d v) else None)
      (rev Cd))
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

(** [move_at d e xs 0 C]: the last [length xs] axes of [d] moved onto the
    minor end of [e], i.e.
    [set_nth (set_nth C d (firstn (length (ax C d) - length xs) (ax C d))) e (ax C e ++ xs)],
    in one pass ([i]: the index of the head of [C]; [take] is [firstn]). *)
Fixpoint move_at (d e : nat) (xs : list nat) (i : nat) (C : list (list nat)) : list (list nat) :=
  match C with
  | [] => []
  | x :: C' =>
      let x' := if i =? d then take (length x - length xs) x else x in
      (if i =? e then x' ++ xs else x') :: move_at d e xs (S i) C'
  end.

(** How many of [l] equal [v]: over the sizes of a list of axes, [cnt]. *)
Fixpoint count (v : nat) (l : list nat) : nat :=
  match l with
  | [] => 0
  | x :: l' => if x =? v then S (count v l') else count v l'
  end.

(** The greedy state is [C] (the axes held) and [D] (the target's), one
    list per dimension, both of length [r], with the sizes of their axes
    alongside ([CS], [DS]: [map (map (asize m))] of them, so that
    [cnt m v] of a dimension is [count v] of its sizes); the tests walk
    them together ([e]: the index of their heads) instead of looking
    dimensions up by index. Dimension [e] needs size-[v] axes when it
    holds fewer than the target's; dimension [d] has a surplus when it
    holds more. *)

(** Some dimension needs an axis of a size its target has. *)
Fixpoint needs_left (CS DS : list (list nat)) : bool :=
  match CS with
  | [] => false
  | Ce :: CS' =>
      let De := hd [] DS in
      existsb (fun v => count v Ce <? count v De) De || needs_left CS' (tl DS)
  end.

(** A dimension of the state: its index, axes and their sizes, the target's axes and their sizes. *)
Definition gdim : Type := nat * list nat * list nat * list nat * list nat.

(** The dimensions other than [d] that need size-[v] axes, in order. *)
Fixpoint needers (v d e : nat) (C CS D DS : list (list nat)) : list gdim :=
  match C with
  | [] => []
  | Ce :: C' =>
      let CSe := hd [] CS in
      let DSe := hd [] DS in
      let t := needers v d (S e) C' (tl CS) (tl D) (tl DS) in
      if negb (e =? d) && (count v CSe <? count v DSe) then (e, Ce, CSe, hd [] D, DSe) :: t else t
  end.

(** Some dimension other than [d] needs size-[v] axes. *)
Fixpoint other_needs (v d e : nat) (CS DS : list (list nat)) : bool :=
  match CS with
  | [] => false
  | Ce :: CS' => (negb (e =? d) && (count v Ce <? count v (hd [] DS))) || other_needs v d (S e) CS' (tl DS)
  end.

(** Dimension [d] (sizes [CSd], target's [DSd]) holds an axis of a size it
    has in surplus and another dimension needs. *)
Definition pending_out (CS DS : list (list nat)) (d : nat) (CSd DSd : list nat) : bool :=
  existsb (fun v => (count v DSd <? count v CSd) && other_needs v d 0 CS DS) CSd.

(** The axes [rb] (sizes [rbS]) that join the move, over the sizes of the
    dimensions ([cdS], [ceS]: what [d] and [e] hold as it grows). *)
Fixpoint extend (single : bool) (DSd DSe : list nat) (rb rbS cdS ceS grp : list nat) : list nat :=
  match rb, rbS with
  | b :: rb', w :: rbS' =>
      if negb single && (count w DSd <? count w cdS) && (count w ceS <? count w DSe)
      then extend single DSd DSe rb' rbS' (removelast cdS) (ceS ++ [w]) (b :: grp)
      else grp
  | _, _ => grp
  end.

Definition b2n (b : bool) : nat := if b then 1 else 0.

(** The receiver of a direct move of axis [a]: the first of the needers
    [es] of the least key [2 * (a not in its target) + (pending_out)],
    with its [pending_out] (each computed once; a single needer is taken
    without its key). *)
Definition needer_key (a : nat) (De : list nat) (po : bool) : nat := 2 * b2n (negb (memb a De)) + b2n po.

Fixpoint first_needer (CS DS : list (list nat)) (a : nat) (x : gdim) (kx : nat) (px : bool) (l : list gdim)
    : gdim * bool :=
  match l with
  | [] => (x, px)
  | y :: l' =>
      let '(e, _, CSe, De, DSe) := y in
      let py := pending_out CS DS e CSe DSe in
      let ky := needer_key a De py in
      if ky <? kx then first_needer CS DS a y ky py l' else first_needer CS DS a x kx px l'
  end.

Definition receiver (CS DS : list (list nat)) (a : nat) (es : list gdim) : option (gdim * bool) :=
  match es with
  | [] => None
  | x :: l =>
      let '(e, _, CSe, De, DSe) := x in
      let px := pending_out CS DS e CSe DSe in
      match l with
      | [] => Some (x, px)
      | _ => Some (first_needer CS DS a x (needer_key a De px) px l)
      end
  end.

(** The best direct move from [d] (axes [Cd], sizes [CSd], target's
    [Dd], [DSd]): [(key, (d, e, axes))]. *)
Definition direct_from (single : bool) (C CS D DS : list (list nat)) (d : nat) (Cd CSd Dd DSd : list nat)
    : option (nat * (nat * nat * list nat)) :=
  match rev' Cd, rev' CSd with
  | a :: rb, v :: rbS =>
      if negb (count v DSd <? count v CSd) then None else
      match receiver CS DS a (needers v d 0 C CS D DS) with
      | None => None
      | Some ((e, _, CSe, De, DSe), po) =>
          let grp := extend single DSd DSe rb rbS (removelast CSd) (CSe ++ [v]) [a] in
          Some (2 * b2n po + b2n (negb (memb a De)), (d, e, grp))
      end
  | _, _ => None
  end.

(** The first direct move of the least key over the dimensions [d] on
    ([Cs], [CSs], [Ds], [DSs]); none can beat key 0. *)
Fixpoint best_direct_from (single : bool) (C CS D DS : list (list nat)) (d : nat) (Cs CSs Ds DSs : list (list nat))
    (acc : option (nat * (nat * nat * list nat))) : option (nat * (nat * nat * list nat)) :=
  match Cs with
  | [] => acc
  | Cd :: Cs' =>
      if match acc with Some (k, _) => k =? 0 | None => false end then acc else
      let acc' := match direct_from single C CS D DS d Cd (hd [] CSs) (hd [] Ds) (hd [] DSs), acc with
                  | None, _ => acc
                  | Some x, None => Some x
                  | Some x, Some y => if fst x <? fst y then Some x else acc
                  end in
      best_direct_from single C CS D DS (S d) Cs' (tl CSs) (tl Ds) (tl DSs) acc'
  end.

Definition best_direct (single : bool) (C CS D DS : list (list nat)) : option (nat * nat * list nat) :=
  option_map snd (best_direct_from single C CS D DS 0 C CS D DS None).

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

(** The fuel is a list (its length: [seq 0 n] for [n]), so that its test
    extracts to a plain match. *)
Fixpoint greedy_loop (m : mesh) (src : atype) (D DS : list (list nat)) (single : bool) (fuel : list nat)
    (C CS : list (list nat)) : plan * list (list nat) :=
  let r := length src in
  match fuel with
  | [] => ([], C)
  | _ :: f =>
      if negb (needs_left CS DS) then ([], C) else
      match best_direct single C CS D DS with
      | Some (d, e, grp) =>
          let C1 := move_at d e grp 0 C in
          let (p, C2) := greedy_loop m src D DS single f C1 (move_at d e (map (asize m) grp) 0 CS) in
          (AllToAll d e grp :: p, C2)
      | None =>
          let C1 := map (arrange_dim m r D C) (seq 0 r) in
          if list_eq_dec (list_eq_dec Nat.eq_dec) C1 C then ([], C) else
          let (p, C2) := greedy_loop m src D DS single f C1 (map (map (asize m)) C1) in
          (AllPermute (tyof src (ax C1)) :: p, C2)
      end
  end.

(** [extras_f m r (ax D) (ax C)] below [r] (the length of [C] and [D]),
    over the lists: the same pairs offered in the same order (first the
    axes of each dimension of [C], then every axis of the mesh, to each
    dimension in turn), the extras of a dimension and the axes added so
    far threaded along; [AD], [AA]: every axis of [D], of [C]. *)
Fixpoint extra_offer (m : mesh) (AD AA Dd Cd : list nat) (Ed AE : list nat) (l : list nat) : list nat * list nat :=
  match l with
  | [] => (Ed, AE)
  | a :: l' =>
      let v := asize m a in
      if negb (memb a AE) && (cnt m v Dd + cnt m v Ed <? cnt m v Cd) && (cnt m v AD + cnt m v AE <? cnt m v AA)
      then extra_offer m AD AA Dd Cd (Ed ++ [a]) (a :: AE) l'
      else extra_offer m AD AA Dd Cd Ed AE l'
  end.

Fixpoint extras_pass (m : mesh) (AD AA : list nat) (sel : list nat -> list nat) (D C E : list (list nat)) (AE : list nat)
    : list (list nat) * list nat :=
  match C with
  | [] => ([], AE)
  | Cd :: C' =>
      let '(Ed, AE1) := extra_offer m AD AA (hd [] D) Cd (hd [] E) AE (sel Cd) in
      let '(E', AE2) := extras_pass m AD AA sel (tl D) C' (tl E) AE1 in
      (Ed :: E', AE2)
  end.

Definition extras_l (m : mesh) (D C : list (list nat)) : list (list nat) :=
  let AD := concat D in
  let AA := concat C in
  let keep := filter (fun a => negb (memb a AD)) in
  let '(E1, AE1) := extras_pass m AD AA keep D C (map (fun _ => []) C) [] in
  let l := keep (seq 0 (length m)) in
  fst (extras_pass m AD AA (fun _ => l) D C E1 AE1).

(** The greedy plan from the slices [XL] ([SL], [DL]: the source's and the
    target's axes; [r] lists of each; [DS]: the sizes of [DL]'s). *)
Fixpoint app_each (SL XL : list (list nat)) : list (list nat) :=
  match SL with
  | [] => []
  | Sd :: SL' => (Sd ++ hd [] XL) :: app_each SL' (tl XL)
  end.

Definition greedy_x (m : mesh) (src : atype) (SL DL DS XL : list (list nat)) (single : bool) : plan :=
  let r := length src in
  let C0 := app_each SL XL in
  let (mv, Cl) := greedy_loop m src DL DS single (seq 0 (2 * length m + 2)) C0 (map (map (asize m)) C0) in
  let C := ax Cl in
  let E := ax (extras_l m DL Cl) in
  slices_of r (ax XL) ++ mv ++ finish src C (fun d => ax DL d ++ E d) E.

(** [single] only matters when some all-to-all moves several axes: without
    one, both runs make the same plan, which is computed once. *)
Definition multi_a2a (p : plan) : bool :=
  existsb (fun c => match c with AllToAll _ _ (_ :: _ :: _) => true | _ => false end) p.

Definition greedy_both (m : mesh) (src : atype) (SL DL DS XL : list (list nat)) : list plan :=
  let p := greedy_x m src SL DL DS XL false in
  if multi_a2a p then [p; greedy_x m src SL DL DS XL true] else [p].

(** [slicer_f m r (ax SL) (ax DL) budget] and [slicer_div_f m r (ax SL) (ax DL) g]
    below [r] over the lists, as lists ([SL], [DL]: [r] lists each): the
    same pairs offered in the same order, the slices of a dimension and
    the axes sliced so far threaded along ([AS], [AD]: every axis of [SL],
    of [DL]; the axes offered are never in [AS]). [slice_offer] offers
    [l] to dimension [d] (source axes [Sd], target's [Dd]). *)
Fixpoint slice_offer (m : mesh) (div : option (nat -> nat)) (budget : bool) (AS AD : list nat) (d : nat)
    (Sd Dd Xd AX : list nat) (l : list nat) : list nat * list nat :=
  match l with
  | [] => (Xd, AX)
  | a :: l' =>
      let v := asize m a in
      let ok := negb (memb a AX) &&
        (((cnt m v Sd + cnt m v Xd <? cnt m v Dd) && (negb budget || (cnt m v AS + cnt m v AX <? cnt m v AD))) ||
         match div with
         | Some g => memb a Dd && (g d mod (nprod m Sd * nprod m Xd * v) =? 0)
         | None => false
         end) in
      if ok then slice_offer m div budget AS AD d Sd Dd (Xd ++ [a]) (a :: AX) l'
      else slice_offer m div budget AS AD d Sd Dd Xd AX l'
  end.

Fixpoint slice_pass (m : mesh) (div : option (nat -> nat)) (budget : bool) (AS AD : list nat)
    (sel : list nat -> list nat) (d : nat) (SL DL XL : list (list nat)) (AX : list nat)
    : list (list nat) * list nat :=
  match SL with
  | [] => ([], AX)
  | Sd :: SL' =>
      let Dd := hd [] DL in
      let '(Xd, AX1) := slice_offer m div budget AS AD d Sd Dd (hd [] XL) AX (sel Dd) in
      let '(XL', AX2) := slice_pass m div budget AS AD sel (S d) SL' (tl DL) (tl XL) AX1 in
      (Xd :: XL', AX2)
  end.

Definition slicer_l (m : mesh) (div : option (nat -> nat)) (budget : bool) (SL DL : list (list nat)) : list (list nat) :=
  let AS := concat SL in
  let AD := concat DL in
  let keep := filter (fun a => negb (memb a AS)) in
  let '(X1, AX1) := slice_pass m div budget AS AD keep 0 SL DL (map (fun _ => []) SL) [] in
  let l := keep AD in
  fst (slice_pass m div budget AS AD (fun _ => l) 0 SL DL X1 AX1).

(** * Choosing the plan *)

(** The canonical plan, then the greedy ones for each slicing mode (0
    within the target's counts and budget, 1 within the counts, 2 also
    into the target's own dimension while the size divides), a mode whose
    slices equal an earlier mode's being skipped (it would make the same
    plans). *)
Definition candidates (m : mesh) (src dst : atype) : list plan :=
  let r := length src in
  let S := sax src in
  let D := sax dst in
  let SL := map S (seq 0 r) in
  let DL := map D (seq 0 r) in
  let X1 := slicer_f m r S D false in
  (* the slices of each mode, as lists ([slicer_l]: [slicer_f], [slicer_div_f]) *)
  let k0 := slicer_l m None true SL DL in
  let k1 := map X1 (seq 0 r) in
  let k2 := slicer_l m (Some (gs src)) false SL DL in
  let same := fun k k' => if list_eq_dec (list_eq_dec Nat.eq_dec) k k' then true else false in
  let DS := map (map (asize m)) DL in
  canonical_x m src dst X1 ::
  greedy_both m src SL DL DS k0 ++
  (if same k1 k0 then [] else greedy_both m src SL DL DS k1) ++
  (if same k2 k0 || same k2 k1 then [] else greedy_both m src SL DL DS k2).

Definition coll_eq_dec : forall x y : coll, {x = y} + {x <> y}.
Proof.
  decide equality; try apply Nat.eq_dec; try apply (list_eq_dec Nat.eq_dec).
  apply (list_eq_dec dim_eq_dec).
Defined.

Definition plan_eqb (p q : plan) : bool := if list_eq_dec coll_eq_dec p q then true else false.

(** Validate each distinct candidate once (a repeated candidate cannot be
    strictly better than itself), by [v] ([Validate.validator], which is
    [validate]); keep the first of the least cost, with the report [v]
    gave it. *)
Definition pick_step (v : plan -> option report) (G : list nat)
    (acc : list plan * option (plan * report * list nat)) (p : plan) : list plan * option (plan * report * list nat) :=
  if existsb (plan_eqb p) (fst acc) then acc else
  (p :: fst acc,
   match v p with
   | None => snd acc
   | Some r =>
       let k := cost G p r in
       match snd acc with
       | Some (_, _, k0) => if better k k0 then Some (p, r, k) else snd acc
       | None => Some (p, r, k)
       end
   end).

Definition pick_with_r (v : plan -> option report) (G : list nat) (ps : list plan) : option (plan * report) :=
  option_map fst (snd (fold_left (pick_step v G) ps ([], None))).

Definition pick_with (v : plan -> option report) (G : list nat) (ps : list plan) : option plan :=
  option_map fst (pick_with_r v G ps).

Definition pick (m : mesh) (src dst : atype) (ps : list plan) : option plan :=
  pick_with (validator m src dst) (glue m src dst) ps.

(** The plan and whether the memory bound is guaranteed for it. *)
Definition synthesize (m : mesh) (src dst : atype) : bool * plan :=
  match pick m src dst (candidates m src dst) with
  | Some p => (true, p)
  | None => (false, naive m src dst)
  end.
