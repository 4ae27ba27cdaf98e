(** Traffic certificates: a checkable proof that no accepted plan within a
    memory cap receives less than a given figure.

    A certificate lists types with potentials. The potential of a type is
    its listed figure (the first entry for it), else its transfer lower
    bound to [dst] ([Traffic.lower_bound], which holds for every plan
    whatever the certificate says). [certify] checks that the potential of
    [dst] is 0 and that along every step the checker accepts from a listed
    type within the cap, the potential drops by at most what the step
    receives. Then every accepted plan within the cap receives at least the
    potential of its source ([Certifyproof.certify_sound]): the checker is
    the verified half of a branch-and-bound whose search (which types to
    list, with which figures) is untrusted and may live anywhere.

    Steps are enumerated, not guessed: every collective the rules accept
    from a type is among [cands] or a permute to one of [permute_targets]
    ([Certifyproof.cands_complete], [Certifyproof.permute_targets_complete]). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Traffic Search Refine.
Import ListNotations.

(** The axes of [pool] outside [xs]. *)
Definition without (pool xs : list nat) : list nat := filter (fun a => negb (memb a xs)) pool.

(** Ordered lists of distinct elements of [pool], at most [n] long, whose
    group size divides [N] (the empty list included). *)
Fixpoint arrangements (m : mesh) (n N : nat) (pool : list nat) : list (list nat) :=
  match n with
  | 0 => [[]]
  | S n' =>
      [] :: flat_map (fun a => if N mod asize m a =? 0
                               then map (cons a) (arrangements m n' (N / asize m a) (without pool [a]))
                               else [])
                     pool
  end.

(** Every type whose dimensions have the global and local sizes [gls], its
    axes drawn from [pool], each at most once. *)
Fixpoint types_shaped (m : mesh) (gls : list (nat * nat)) (pool : list nat) : list atype :=
  match gls with
  | [] => [[]]
  | (g, l) :: rest =>
      flat_map (fun xs => if g / nprod m xs =? l
                          then map (cons (mkdim xs g)) (types_shaped m rest (without pool xs))
                          else [])
               (arrangements m (length pool) g pool)
  end.

Definition shape_of (m : mesh) (t : atype) : list (nat * nat) := map (fun D => (gsize D, lsize m D)) t.

(** Candidate steps from [u] other than permutes: gathers and all-to-alls
    of every minor suffix, slices of every arrangement of unused axes;
    [apply] decides which are legal. *)
Definition cands (m : mesh) (u : atype) : list coll :=
  let r := length u in
  let pool := without (seq 0 (length m)) (used u) in
  flat_map (fun d =>
              let D := nth d u (mkdim [] 0) in
              map (AllGather d) (suffixes (axes D))
              ++ map (DynSlice d) (arrangements m (length pool) (lsize m D) pool)
              ++ flat_map (fun e => map (AllToAll d e) (suffixes (axes D))) (seq 0 r))
           (seq 0 r).

(** The targets of permutes from [u]: every type of its shape. *)
Definition permute_targets (m : mesh) (u : atype) : list atype :=
  types_shaped m (shape_of m u) (seq 0 (length m)).

(** The first figure listed for [t]. *)
Fixpoint lookup (cert : list (atype * nat)) (t : atype) : option nat :=
  match cert with
  | [] => None
  | (u, d) :: rest => if atype_eqb u t then Some d else lookup rest t
  end.

Definition pot (m : mesh) (dst : atype) (cert : list (atype * nat)) (t : atype) : nat :=
  match lookup cert t with Some d => d | None => lower_bound m t dst end.

(** The checker looks entries up in a table of [nbuckets] buckets by a key
    of the type ([tkey], every step reduced modulo [nbuckets], so no value
    grows), each bucket the entries of its key in their order: the first
    entry for a type in its bucket is its first in the certificate
    ([Certifyproof.blookup_table]). *)
Definition nbuckets : nat := 64.

Definition tkey_axis (k a : nat) : nat := (k * 5 + a + 1) mod nbuckets.

Definition tkey_dim (k : nat) (D : dim) : nat :=
  fold_left tkey_axis (axes D) ((k * 3 + gsize D mod nbuckets) mod nbuckets).

Definition tkey (t : atype) : nat := fold_left tkey_dim t 0.

Definition table (cert : list (atype * nat)) : list (list (atype * nat)) :=
  let keyed := map (fun e => (tkey (fst e), e)) cert in
  map (fun k => map snd (filter (fun ke => fst ke =? k) keyed)) (seq 0 nbuckets).

Definition blookup (tb : list (list (atype * nat))) (t : atype) : option nat := lookup (nth (tkey t) tb []) t.

(** [R <= pot t] ([look]: the lookup of the certificate's figures), the
    lower bound decided by the first device needing [R]. *)
Definition pot_at_least (m : mesh) (dst : atype) (look : atype -> option nat) (t : atype) (R : nat) : bool :=
  match look t with
  | Some d => R <=? d
  | None => existsb (fun r => R <=? need m t dst (coords_of_rank m r)) (seq 0 (ndevices m))
  end.

(** Step [c] from [u] (listed at [du]) keeps the potential within what it receives. *)
Definition edge_ok (m : mesh) (dst : atype) (look : atype -> option nat) (cap : nat) (u : atype) (du : nat)
    (c : coll) : bool :=
  match apply m u c with
  | Err _ => true
  | Ok v => negb (size m v <=? cap) || (du <=? recv m u c v) || pot_at_least m dst look v (du - recv m u c v)
  end.

(** An entry within the cap: its figure is at most the type's potential, and
    every step from it keeps the potential. A permute receives the whole
    block ([Checker.recv]) unless it moves nothing, so permutes are
    enumerated only for figures above the block size. *)
Definition entry_ok (m : mesh) (dst : atype) (look : atype -> option nat) (cap : nat) (e : atype * nat) : bool :=
  let (u, du) := e in
  negb (size m u <=? cap)
  || (pot_at_least m dst look u du && forallb (edge_ok m dst look cap u du) (cands m u)
      && (negb (size m u <? du)
          || forallb (fun v => edge_ok m dst look cap u du (AllPermute v)) (permute_targets m u))).

(** A permute that moves nothing is the identity when no axis has size 1. *)
Definition no_unit_axes (m : mesh) : bool := forallb (fun s => 2 <=? s) m.

Definition certify (m : mesh) (dst : atype) (cap : nat) (cert : list (atype * nat)) : bool :=
  let look := blookup (table cert) in
  no_unit_axes m && (pot m dst cert dst =? 0) && forallb (entry_ok m dst look cap) cert.

(** The figure [T] is the least traffic of any plan the checker accepts
    from [src] to [dst] with every type within [cap]. *)
Definition certify_traffic (m : mesh) (src dst : atype) (cap T : nat) (cert : list (atype * nat)) : bool :=
  certify m dst cap cert && (T <=? pot m dst cert src).

(** The same over a split [fs] of the mesh [m] (types over [m], the
    certificate over the split, whose sub-axes [certify] requires to have
    size 2 or more): the figure is then the least over the plans on the
    split and, carried to it, the plans on [m]. *)
Definition certify_split (m : mesh) (fs : split) (src dst : atype) (cap T : nat) (cert : list (atype * nat))
    : bool :=
  nat_list_eqb (map prod fs) m && certify_traffic (rmesh fs) (rtype fs src) (rtype fs dst) cap T cert.
