(** The middle phase by search: a branch-and-bound over sequences of
    all-to-alls between the slices and the gathers, under the cost each
    step would have ([Checker.recv]), added to the synthesizer's candidates.

    Between the slices and the gathers every type has the same local size
    [s]; an all-to-all moving axes [xs] costs [s - s / nprod xs] and a
    permute [s]. An all-to-all appends its axes to the minor end, so the
    order in which axes arrive decides whether a final permute is needed;
    the greedy construction moves axes by dimension index, one group at a
    time, and often ends with a permute that a different order, a larger
    group, or one detour through another dimension avoids. The search tries
    those. It decides nothing about correctness: every plan it makes is
    validated like the others, and [pick] keeps the cheapest
    ([Searchproof.synthesize_best_min]). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Validate Synth.
Import ListNotations.

(** Length of the longest prefix of [l'] whose axes all occur in [l]. *)
Fixpoint lcp_in (l l' : list nat) : nat :=
  match l' with
  | a :: t => if memb a l then S (lcp_in l t) else 0
  | [] => 0
  end.

Fixpoint remove_one (v : nat) (l : list nat) : list nat :=
  match l with
  | [] => []
  | x :: t => if x =? v then t else x :: remove_one v t
  end.

Definition list_eqb (C C' : list (list nat)) : bool :=
  if list_eq_dec (list_eq_dec Nat.eq_dec) C C' then true else false.

(** Move the last axes of [d], [xs], onto the minor end of [e] ([Synth.move_at]). *)
Definition move (C : list (list nat)) (d e : nat) (xs : list nat) : list (list nat) := move_at d e xs 0 C.

(** [xs] is a prefix of [l]. *)
Fixpoint prefixb (xs l : list nat) : bool :=
  match xs, l with
  | [], _ => true
  | a :: xs', b :: l' => (a =? b) && prefixb xs' l'
  | _ :: _, [] => false
  end.

(** The non-empty suffixes of a list, longest first. *)
Fixpoint suffixes (l : list nat) : list (list nat) :=
  match l with
  | [] => []
  | _ :: t => l :: suffixes t
  end.

(** What the search needs of a dimension of a state (axes [Ce], target
    order [De]), computed once per state in one pass over both: whether it
    holds a prefix of its target order ([fopen]), the axes its target order
    takes next (read only when it does), whether it is done ([fdone]: the
    target's axes, then only axes the target does not use), and its axes
    past the longest common prefix with its target order ([frest]: the
    axes it may move). *)
Record dfacts := mkdfacts { fopen : bool; fnext : list nat; fdone : bool; frest : list nat }.

Fixpoint dim_facts (U : list nat) (Ce De : list nat) : dfacts :=
  match Ce, De with
  | [], _ => mkdfacts true De (match De with [] => true | _ => false end) []
  | _ :: _, [] => mkdfacts false [] (forallb (fun a => negb (memb a U)) Ce) Ce
  | a :: Ce', b :: De' => if a =? b then dim_facts U Ce' De' else mkdfacts false [] false Ce
  end.

Fixpoint state_facts (U : list nat) (C D : list (list nat)) : list dfacts :=
  match C with
  | [] => []
  | Ce :: C' => dim_facts U Ce (hd [] D) :: state_facts U C' (tl D)
  end.

(** A move of the axes [xs] (the last [length xs] of [d], [free]: none of
    them used by the target) onto the minor end of [e] makes progress when
    they are the next ones [e] needs, or [e] is done and the target uses
    none of them. *)
Definition progress (xs : list nat) (free : bool) (F : dfacts) : bool :=
  (fopen F && prefixb xs (fnext F)) || (fdone F && free).

(** The moves [(d, e, xs)] of the axes past the common prefix of [d] with
    its target: every one ([all = true]) or those that make progress
    ([all = false]); by [d], then larger groups first (so that cheap plans
    are found early and prune the rest), then by [e]. The receivers [R]
    are the dimensions [e] with their facts, in order: all of them, or
    (for [all = false]) those open or done, the only ones progress can
    reach ([receivers]). [moves_to] lists the moves of [xs] from [d] to
    the receivers. *)
Fixpoint receivers (all : bool) (e : nat) (FS : list dfacts) : list (nat * dfacts) :=
  match FS with
  | [] => []
  | F :: FS' => if all || fopen F || fdone F then (e, F) :: receivers all (S e) FS' else receivers all (S e) FS'
  end.

Fixpoint moves_to (all : bool) (d : nat) (xs : list nat) (free : bool) (R : list (nat * dfacts))
    (rest : list (nat * nat * list nat)) : list (nat * nat * list nat) :=
  match R with
  | [] => rest
  | (e, F) :: R' =>
      let t := moves_to all d xs free R' rest in
      if (e =? d) || negb (all || progress xs free F) then t else (d, e, xs) :: t
  end.

(** [moves_sfx] lists those of every suffix of [l] (longest first),
    followed by [rest], and says whether no axis of [l] is used by the
    target (each axis tested once). *)
Fixpoint moves_sfx (all : bool) (U : list nat) (d : nat) (R : list (nat * dfacts)) (l : list nat)
    (rest : list (nat * nat * list nat)) : list (nat * nat * list nat) * bool :=
  match l with
  | [] => (rest, true)
  | a :: t =>
      let '(ms, free) := moves_sfx all U d R t rest in
      let free' := negb (memb a U) && free in
      (moves_to all d l free' R ms, free')
  end.

Fixpoint moves_from (all : bool) (U : list nat) (R : list (nat * dfacts)) (d : nat) (FD : list dfacts)
    : list (nat * nat * list nat) :=
  match FD with
  | [] => []
  | F :: FD' => fst (moves_sfx all U d R (frest F) (moves_from all U R (S d) FD'))
  end.

Definition moves (all : bool) (U : list nat) (FS : list dfacts) : list (nat * nat * list nat) :=
  moves_from all U (receivers all 0 FS) 0 FS.

(** The facts of the state reached by a move between [d] and [e]: those of
    the other dimensions are unchanged ([i]: the index of the heads). *)
Fixpoint refacts (U : list nat) (d e i : nat) (C D : list (list nat)) (FS : list dfacts) : list dfacts :=
  match C, FS with
  | Ce :: C', F :: FS' =>
      (if (i =? d) || (i =? e) then dim_facts U Ce (hd [] D) else F) :: refacts U d e (S i) C' (tl D) FS'
  | _, _ => []
  end.

(** The extras after a state where every dimension is done: its tails (no permute). *)
Definition tails_of (C D : list (list nat)) : nat -> list nat := fun d => drop (length (ax D d)) (ax C d).

(** A state not yet done can be finished by one permute to the target and
    its extras ([Synth.extras_f]) where they give the same local size in
    every dimension: those extras. *)
Fixpoint same_sizes (m : mesh) (C D E : list (list nat)) : bool :=
  match C with
  | [] => true
  | Cd :: C' => (nprod m Cd =? nprod m (hd [] D) * nprod m (hd [] E)) && same_sizes m C' (tl D) (tl E)
  end.

Definition finishable (m : mesh) (r : nat) (C D : list (list nat)) : option (nat -> list nat) :=
  let E := extras_l m D C in
  if same_sizes m C D E then Some (ax E) else None.

Definition a2a_cost (m : mesh) (s : nat) (xs : list nat) : nat := s - s / nprod m xs.

(** The best plan found: its cost, its moves (last first), the state it
    ends in and the extras that finish it. *)
Definition best_t := option (nat * list coll * list (list nat) * (nat -> list nat)).

Definition keep_better (c : nat) (mv : list coll) (C : list (list nat)) (E : nat -> list nat) (b : best_t)
    : best_t :=
  match b with
  | Some (c0, _, _, _) => if c <? c0 then Some (c, mv, C, E) else b
  | None => Some (c, mv, C, E)
  end.

Definition below (c : nat) (b : best_t) : bool :=
  match b with Some (c0, _, _, _) => c <? c0 | None => true end.

(** The order axes leaving a dimension take, major to minor (a sort key):
    those the target does not use first (they leave last), then the others
    by the dimension they go to and their place in it, so that each group
    sits at the minor end in its target's order. The keys of the axes the
    target uses are computed once per search ([leave_keys]: an axis's
    entry from the last dimension that holds it comes first); every other
    axis has key 0. *)
Definition leave_keys (m : mesh) (r : nat) (D : list (list nat)) : list (nat * nat) :=
  fold_left (fun acc e =>
    fold_left (fun acc' a => (a, S (e * S (length m) + index_of a (ax D e))) :: acc') (ax D e) acc)
    (seq 0 r) [].

Fixpoint key_of (K : list (nat * nat)) (a : nat) : nat :=
  match K with
  | [] => 0
  | (b, k) :: K' => if a =? b then k else key_of K' a
  end.

(** [sort_by (key_of K)], each key computed once: a stable insertion sort
    of the pairs (key, axis). *)
Fixpoint insert_keyed (k x : nat) (l : list (nat * nat)) : list (nat * nat) :=
  match l with
  | [] => [(k, x)]
  | (ky, y) :: l' => if k <? ky then (k, x) :: l else (ky, y) :: insert_keyed k x l'
  end.

Definition sort_keyed (K : list (nat * nat)) (l : list nat) : list nat :=
  map snd (fold_left (fun acc x => insert_keyed (key_of K x) x acc) l []).

(** A permute that reorders every dimension: the longest prefix of its
    target order that it holds, then the axes that must leave, in
    key order. Same axes per dimension, so the same local shape. *)
Definition reorder_dim (K : list (nat * nat)) (Cd Dd : list nat) : list nat :=
  let k := lcp_in Cd Dd in
  let stay := take k Dd in
  stay ++ sort_keyed K (filter (fun a => negb (memb a stay)) Cd).

(** Every dimension reordered, walking [C] and [D] together. *)
Fixpoint reorder_all (K : list (nat * nat)) (C D : list (list nat)) : list (list nat) :=
  match C with
  | [] => []
  | Cd :: C' => reorder_dim K Cd (hd [] D) :: reorder_all K C' (tl D)
  end.

(** A permute that also exchanges axes of the same size between
    dimensions (any type of the same local shape will do): every dimension
    keeps the sizes of its axes; it takes the longest prefix of its target
    order that the axes in use can give it, and its other slots are filled
    with the remaining axes in key order. *)
Fixpoint take_prefix (m : mesh) (Dd pool sl : list nat) : list nat * list nat * list nat :=
  match Dd with
  | [] => ([], pool, sl)
  | a :: Dd' =>
      if memb a pool && memb (asize m a) sl
      then let '(p, pool', sl') := take_prefix m Dd' (remove Nat.eq_dec a pool)
                                               (remove_one (asize m a) sl) in (a :: p, pool', sl')
      else ([], pool, sl)
  end.

(** Fill slots of the sizes [sl] from [pool] (sorted by preference). *)
Fixpoint fill (m : mesh) (sl pool : list nat) : list nat * list nat :=
  match sl with
  | [] => ([], pool)
  | v :: sl' =>
      match find (fun a => asize m a =? v) pool with
      | Some a => let '(f, pool') := fill m sl' (remove Nat.eq_dec a pool) in (a :: f, pool')
      | None => fill m sl' pool
      end
  end.

(** First pass, dimension by dimension ([C] and [D] walked together):
    the prefix each takes and the sizes of its slots left; the pool left. *)
Fixpoint retarget_pre (m : mesh) (C D : list (list nat)) (pool : list nat)
    : list (list nat * list nat) * list nat :=
  match C with
  | [] => ([], pool)
  | Cd :: C' =>
      let '(p, pool', sl) := take_prefix m (hd [] D) pool (map (asize m) Cd) in
      let '(l, pool'') := retarget_pre m C' (tl D) pool' in
      ((p, sl) :: l, pool'')
  end.

(** Second pass: each dimension's slots filled from the pool. *)
Fixpoint retarget_fill (m : mesh) (K : list (nat * nat)) (l : list (list nat * list nat)) (pool : list nat)
    : list (list nat) :=
  match l with
  | [] => []
  | (p, sl) :: l' => let '(f, pool') := fill m sl pool in (p ++ sort_keyed K f) :: retarget_fill m K l' pool'
  end.

Definition retarget (m : mesh) (K : list (nat * nat)) (C D : list (list nat)) : list (list nat) :=
  let '(pre, pool) := retarget_pre m C D (concat C) in
  retarget_fill m K pre (sort_keyed K pool).

(** Depth-first branch-and-bound from [C] ([mv]: the moves so far, last
    first; [cost]: their cost); [buf] detours (moves that make no
    progress) and [perm] reordering permutes are allowed. [g]: global
    sizes, for divisibility. The state threads the best plan found and the
    number of states the search may still visit, which bounds its time. *)
(** The fuel is a list (its length: [seq 0 n] for [n]), so that its test
    extracts to a plain match; [FS]: the facts of [C] ([state_facts U C D]). *)
Fixpoint dfs (m : mesh) (src : atype) (U : list nat) (K : list (nat * nat)) (r s : nat) (g : nat -> nat)
    (D : list (list nat)) (fuel : list nat) (buf perm : nat) (C : list (list nat)) (FS : list dfacts) (cost : nat)
    (mv : list coll) (st : best_t * nat) : best_t * nat :=
  let budget0 := snd st in
  if budget0 =? 0 then st else
  let budget := pred budget0 in
  let b := fst st in
  if forallb fdone FS then (keep_better cost mv C (tails_of C D) b, budget) else
  (* A state not done is finished by a permute only where no move makes
     progress, or at the end of the fuel. *)
  let fin := fun _ : unit =>
    if below (cost + s) b
    then match finishable m r C D with Some E => keep_better (cost + s) mv C E b | None => b end
    else b in
  match fuel with
  | [] => (fin tt, budget)
  | _ :: f =>
      let pm := moves false U FS in
      let stuck := match pm with [] => true | _ => false end in
      let b1 := if stuck then fin tt else b in
      (* Detours and permutes only where no move makes progress. *)
      (* [nprod m (ax C e ++ xs)] as [nprod m (ax C e) * n] *)
      let st2 := fold_left (fun stt (dex : nat * nat * list nat) =>
        match dex with
        | (d, e, xs) =>
            let n := nprod m xs in
            let c' := cost + (s - s / n) in
            if below c' (fst stt) && (g e mod (nprod m (ax C e) * n) =? 0)
            then let C1 := move C d e xs in
                 dfs m src U K r s g D f (if stuck then buf - 1 else buf) perm C1 (refacts U d e 0 C1 D FS) c'
                     (AllToAll d e xs :: mv) stt
            else stt
        end)
        (if stuck then (if buf =? 0 then [] else moves true U FS) else pm) (b1, budget) in
      if stuck && negb (perm =? 0) then
        (* the two permutes in turn, each built only when it could still pay *)
        let try := fun stt (mk : unit -> list (list nat)) =>
          if below (cost + s) (fst stt)
          then let C' := mk tt in
               if list_eqb C' C then stt
               else dfs m src U K r s g D f buf (perm - 1) C' (state_facts U C' D) (cost + s)
                        (AllPermute (tyof src (ax C')) :: mv) stt
          else stt in
        try (try st2 (fun _ => reorder_all K C D)) (fun _ => retarget m K C D)
      else st2
  end.

(** States the search visits at most, per slicing. *)
Definition search_budget : nat := 40.

(** The slicing that travels with the target: each target axis the source
    lacks is sliced into the dimension where the axis before it in the
    target's order sits in the source (or where the one before that was
    sliced), else into its own target dimension, so that the group can
    later move in one all-to-all in the target's order.
    [SL], [DL]: the source's and the target's axes, [r] lists of each;
    the slices are a list [XL] of [r] lists. [home_from]: the last
    dimension of the source holding [a] ([r] if none); [fits_l]: [a] can
    be added to dimension [h]; [spare_from]: the first dimension other
    than [e] that the target leaves unsharded and that can take [a] ([r]
    if none). *)
Fixpoint home_from (a d h : nat) (SL : list (list nat)) : nat :=
  match SL with
  | [] => h
  | Sd :: SL' => home_from a (S d) (if memb a Sd then d else h) SL'
  end.

Definition fits_l (m : mesh) (g : nat -> nat) (SL XL : list (list nat)) (h a : nat) : bool :=
  g h mod (nprod m (ax SL h) * nprod m (ax XL h) * asize m a) =? 0.

Fixpoint spare_from (m : mesh) (g : nat -> nat) (SL XL : list (list nat)) (e a d : nat) (DL : list (list nat)) (r : nat) : nat :=
  match DL with
  | [] => r
  | Dd :: DL' =>
      if negb (d =? e) && (match Dd with [] => true | _ => false end) && fits_l m g SL XL d a then d
      else spare_from m g SL XL e a (S d) DL' r
  end.

Definition slicer_along (m : mesh) (r : nat) (SL DL : list (list nat)) (g : nat -> nat) : list (list nat) :=
  let US := concat SL in
  let along := fun (XL : list (list nat)) (e : nat) =>
    fst (fold_left (fun (st : list (list nat) * nat) a =>
           let XL := fst st in
           let h := snd st in
           if memb a US then (XL, home_from a 0 r SL)
           else
             let h' := if fits_l m g SL XL h a then h
                       else let sp := spare_from m g SL XL e a 0 DL r in if sp =? r then e else sp in
             (set_at XL h' (ax XL h' ++ [a]), h'))
         (ax DL e) (XL, e)) in
  fold_left along (seq 0 r) (repeat [] r).

(** The searched plan for the slices [X]. *)
Definition searched_x (m : mesh) (src dst : atype) (X : nat -> list nat) : option plan :=
  let r := length src in
  let S := sax src in
  let Dl := map (sax dst) (seq 0 r) in
  let U := used dst in
  let C0 := map (fun d => S d ++ X d) (seq 0 r) in
  let s := size m (tyof src (ax C0)) in
  match fst (dfs m src U (leave_keys m r Dl) r s (gs src) Dl (seq 0 (length m + 1)) 1 1 C0 (state_facts U C0 Dl) 0 []
                 (None, search_budget)) with
  | None => None
  | Some (_, mv, C, E) =>
      Some (slices_of r X ++ rev' mv ++ finish src (ax C) (fun d => ax Dl d ++ E d) E)
  end.

Definition searched (m : mesh) (src dst : atype) : list plan :=
  let r := length src in
  let SL := map (sax src) (seq 0 r) in
  let DL := map (sax dst) (seq 0 r) in
  flat_map (fun X => match searched_x m src dst X with Some p => [p] | None => [] end)
    [ax (slicer_along m r SL DL (gs src))].

(** The synthesizer's candidates and the searched plans, validated; the
    cheapest is kept ([Synth.pick]). [synthesize_best_with v]: validated by
    [v] ([Validate.validator_valid] where the problem is known valid:
    [Searchproof.synthesize_best_valid]). *)
Definition synthesize_best_with (v : plan -> option report) (m : mesh) (src dst : atype) : bool * plan :=
  match pick_with v (glue m src dst) (candidates m src dst ++ searched m src dst) with
  | Some p => (true, p)
  | None => (false, naive m src dst)
  end.

Definition synthesize_best (m : mesh) (src dst : atype) : bool * plan :=
  synthesize_best_with (validator m src dst) m src dst.

(** The plan [synthesize_best_with v] keeps, with the report [v] gave it
    ([Searchproof.synthesize_best_r_spec]). *)
Definition synthesize_best_r (v : plan -> option report) (m : mesh) (src dst : atype) : option (plan * report) :=
  pick_with_r v (glue m src dst) (candidates m src dst ++ searched m src dst).
