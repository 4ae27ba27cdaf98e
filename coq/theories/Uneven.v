(** Uneven dimensions: a global size [g] that the number [n] of blocks (the
    product of the sizes of the dimension's axes) does not divide.

    Both conventions in use cut a dimension into [n] blocks of [c = ceil(g/n)]
    indices: block [b] covers the global indices [b * c, min(g, (b+1) * c)),
    its valid part, which is short (or empty) for the trailing blocks.
    - padded (JAX / XLA): every device allocates [c] elements; the local
      positions past the block's valid length are padding;
    - chunked ([torch.chunk], what DTensor uses): the local buffer is exactly
      the valid part, [max(0, min(g, (b+1) c) - b c)] elements.
    Under either convention local position [k] of block [b] holds global index
    [b * c + k]; a padded position is padding exactly when that index is at
    least [g].

    Definitions only; the proofs are in [Unevenproof.v]. Nothing here changes
    the even model of [Types.v]: when [n] divides [g] every function below
    agrees with its even counterpart ([Unevenproof.csize_even],
    [Unevenproof.ugidx_gidx], [Unevenproof.usource_even], ...). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Semantics.
Import ListNotations.

(** * One dimension: [g] global indices in [n] blocks *)

(** Block size [ceil(g / n)] (0 when [n = 0], which a well-formed mesh excludes). *)
Definition csize (g n : nat) : nat := (g + (n - 1)) / n.

(** First global index of block [b]. *)
Definition ustart (g n b : nat) : nat := b * csize g n.

(** Valid length of block [b]: [min(g, (b+1) c) - b c], natural subtraction
    giving 0 for the empty trailing blocks. *)
Definition uvalid (g n b : nat) : nat := Nat.min g (S b * csize g n) - b * csize g n.

(** Global index [x] lies in the valid part of block [b]. *)
Definition in_ublock (g n b x : nat) : Prop := ustart g n b <= x < ustart g n b + uvalid g n b.

(** The two conventions, and the length of the local buffer each allocates
    for block [b]. *)
Inductive convention := Padded | Chunked.

Definition ubuf (cv : convention) (g n b : nat) : nat :=
  match cv with
  | Padded => csize g n
  | Chunked => uvalid g n b
  end.

(** * Uneven array types: [atype] without the divisibility requirement *)

Definition wf_uneven_dim (m : mesh) (D : dim) : Prop :=
  0 < gsize D /\ (forall a, In a (axes D) -> a < length m).

Definition wf_uneven (m : mesh) (t : atype) : Prop :=
  wf_mesh m /\ Forall (wf_uneven_dim m) t /\ NoDup (used t).

Definition wf_uneven_dimb (m : mesh) (D : dim) : bool :=
  (0 <? gsize D) && forallb (fun a => a <? length m) (axes D).

Definition wf_unevenb (m : mesh) (t : atype) : bool :=
  wf_meshb m && forallb (wf_uneven_dimb m) t && nodupb (used t).

(** Block size of dimension [D]: [ceil(g / n(axes D))]. *)
Definition ucsize (m : mesh) (D : dim) : nat := csize (gsize D) (nprod m (axes D)).

(** Valid length of the block device [c] holds in dimension [D]. *)
Definition uvlen (m : mesh) (D : dim) (c : coords) : nat :=
  uvalid (gsize D) (nprod m (axes D)) (block m D c).

(** Length of the local buffer of device [c] in dimension [D] under [cv]. *)
Definition ulen (cv : convention) (m : mesh) (D : dim) (c : coords) : nat :=
  ubuf cv (gsize D) (nprod m (axes D)) (block m D c).

(** Global index held at local position [k] of dimension [D] on device [c]
    (both conventions; under [Padded] it is a padding position when this is
    at least [gsize D]). *)
Definition ugidx (m : mesh) (D : dim) (c : coords) (k : nat) : nat := block m D c * ucsize m D + k.

Definition ugindex (m : mesh) (t : atype) (c : coords) (i : list nat) : list nat :=
  map (fun Dk => ugidx m (fst Dk) c (snd Dk)) (combine t i).

(** Positions of the local buffer device [c] allocates under [cv]. *)
Definition urange (cv : convention) (m : mesh) (t : atype) (c : coords) (i : list nat) : Prop :=
  Forall2 (fun D k => k < ulen cv m D c) t i.

(** Valid positions: those holding an element of the array, not padding.
    (They are exactly the positions of the chunked buffer, [urange Chunked].) *)
Definition uvalid_pos (m : mesh) (t : atype) (c : coords) (i : list nat) : Prop :=
  Forall2 (fun D k => k < uvlen m D c) t i.

Definition uvalid_posb (m : mesh) (t : atype) (c : coords) (i : list nat) : bool :=
  (length i =? length t) && forallb (fun Dk => snd Dk <? uvlen m (fst Dk) c) (combine t i).

(** * Memory: the local buffer each convention allocates *)

(** Elements device [c] allocates under [cv]. *)
Definition usize (cv : convention) (m : mesh) (t : atype) (c : coords) : nat :=
  prod (map (fun D => ulen cv m D c) t).

(** Under [Padded] every device allocates the same: the product of the block sizes. *)
Definition usize_padded (m : mesh) (t : atype) : nat := prod (map (ucsize m) t).

(** The most any device allocates under [cv]. *)
Definition usize_max (cv : convention) (m : mesh) (t : atype) : nat :=
  fold_right Nat.max 0 (map (fun r => usize cv m t (coords_of_rank m r)) (seq 0 (ndevices m))).

(** * Data *)

(** The padded distribution of a global array [A]: device [c]'s buffer, with
    [pad] at the padding positions. *)
Definition ulocal {V} (A : list nat -> V) (pad : V) (m : mesh) (t : atype) (c : coords) (i : list nat) : V :=
  if uvalid_posb m t c i then A (ugindex m t c i) else pad.

(** * Collectives on uneven types *)

(** Splitting each block of size [C] (of a dimension of global size [g]) into
    [N] consecutive blocks of the finer blocking is consistent with that
    blocking when [N] divides [C], or when there is a single coarse block
    ([g <= C]); otherwise the finer blocks of a coarse block start elsewhere
    than the coarse block does (e.g. [g = 5] over 2 then 4 blocks: [0,3),[3,5)
    against [0,2),[2,4),[4,5),[]) and a gather along the inner axes alone
    cannot produce the coarser layout. *)
Definition split_ok (N C g : nat) : Prop := Nat.divide N C \/ g <= C.

(** The typing rules of [Rules.step] for gathers, slices and all-to-alls,
    with the divisibility of local sizes replaced by [split_ok] on the
    coarse dimension. *)
Inductive ustep (m : mesh) (t : atype) : coll -> atype -> Prop :=
| ustep_gather : forall d xs P g,
    nth_error t d = Some (mkdim (P ++ xs) g) -> xs <> [] ->
    split_ok (nprod m xs) (ucsize m (mkdim P g)) g ->
    ustep m t (AllGather d xs) (set_nth t d (mkdim P g))
| ustep_slice : forall d xs D,
    nth_error t d = Some D -> xs <> [] ->
    (forall a, In a xs -> a < length m) -> NoDup xs ->
    (forall a, In a xs -> ~ In a (used t)) ->
    split_ok (nprod m xs) (ucsize m D) (gsize D) ->
    ustep m t (DynSlice d xs) (set_nth t d (mkdim (axes D ++ xs) (gsize D)))
| ustep_alltoall : forall d e xs P g E,
    d <> e -> nth_error t d = Some (mkdim (P ++ xs) g) -> nth_error t e = Some E -> xs <> [] ->
    split_ok (nprod m xs) (ucsize m (mkdim P g)) g ->
    split_ok (nprod m xs) (ucsize m E) (gsize E) ->
    ustep m t (AllToAll d e xs)
          (set_nth (set_nth t d (mkdim P g)) e (mkdim (axes E ++ xs) (gsize E))).

(** Data movement on padded buffers, the way JAX runs these collectives: the
    device and position of the input that position [i] of device [c]'s output
    buffer is read from, or [None] when the collective writes fresh padding
    there.
    - gather: the [N] padded blocks of the group are concatenated in group
      order (length [N * c_in], at least [c_out]) and the first [c_out]
      positions kept: position [k] is position [k mod c_in] of member
      [k / c_in];
    - slice: the buffer is padded to [N * c_out] and device [c] keeps piece
      [mr xs c]: position [k] is position [q = mr xs c * c_out + k] of its
      buffer when [q < c_in], fresh padding otherwise;
    - all-to-all: both, along [d] and [e] respectively.
    The chunked convention runs the same way (pad each chunk to [c], run the
    padded collective, drop the padding), so its movement is this one
    restricted to valid positions. [AllPermute] is not modelled on uneven
    types. *)
Definition usource (m : mesh) (t : atype) (op : coll) (t' : atype) (c : coords) (i : list nat)
  : option (coords * list nat) :=
  match op with
  | AllGather d xs =>
      let l := ucsize m (nth d t dflt) in
      let k := nth d i 0 in
      Some (set_digits m xs c (k / l), set_nth i d (k mod l))
  | DynSlice d xs =>
      let q := mr m xs c * ucsize m (nth d t' dflt) + nth d i 0 in
      if q <? ucsize m (nth d t dflt) then Some (c, set_nth i d q) else None
  | AllToAll d e xs =>
      let l := ucsize m (nth d t dflt) in
      let k := nth d i 0 in
      let q := mr m xs c * ucsize m (nth e t' dflt) + nth e i 0 in
      if q <? ucsize m (nth e t dflt)
      then Some (set_digits m xs c (k / l), set_nth (set_nth i d (k mod l)) e q)
      else None
  | AllPermute _ => None
  end.

(** What a padded gather allocates along the gathered dimension before the
    padding is dropped: the [N] concatenated input blocks. *)
Definition ugather_buf (m : mesh) (D : dim) (xs : list nat) : nat := nprod m xs * ucsize m D.
