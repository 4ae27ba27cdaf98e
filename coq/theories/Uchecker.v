(** The checker of plans over uneven types ([Uneven.v]): the typing rules of
    [Uneven.ustep] (gather, slice, all-to-all, with [split_ok] in place of
    divisibility) plus [AllPermute] between types with the same number of
    blocks in every dimension, run step by step, with the types along the
    way, their peak padded buffer and the elements each step receives on
    padded buffers. The counterpart of [Checker.v]; the proofs are in
    [Ucheckerproof.v] ([uapply_spec], [ucheck_ok], [ucheck_correct]). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Permute Uneven.
Import ListNotations.

(** * The rules *)

(** [split_ok] decided (for a positive group size). *)
Definition split_okb (N C g : nat) : bool := (C mod N =? 0) || (g <=? C).

(** Number of blocks of every dimension. *)
Definition dnprods (m : mesh) (t : atype) : list nat := map (fun D => nprod m (axes D)) t.

(** The uneven rules: [ustep], and [AllPermute] to a type with the same
    global shape and the same number of blocks in every dimension (hence the
    same block sizes [ceil(g / n)]: a device's block is sent whole by the
    device holding the same block numbers under the source type). *)
Inductive ucstep (m : mesh) (t : atype) : coll -> atype -> Prop :=
| ucstep_coll : forall op t', ustep m t op t' -> ucstep m t op t'
| ucstep_permute : forall t', wf_uneven m t' -> map gsize t' = map gsize t ->
    dnprods m t' = dnprods m t -> ucstep m t (AllPermute t') t'.

(** The rules as a function, with the errors of [Rules.apply]
    ([NotDivisible] when [split_ok] fails). *)
Definition uapply (m : mesh) (t : atype) (c : coll) : result error atype :=
  match c with
  | AllGather d xs =>
      match nth_error t d with
      | None => Err (BadDim d)
      | Some D =>
          match xs with
          | [] => Err NoAxes
          | _ => match strip_suffix xs (axes D) with
                 | None => Err NotMinorAxes
                 | Some P =>
                     if split_okb (nprod m xs) (ucsize m (mkdim P (gsize D))) (gsize D)
                     then Ok (set_nth t d (mkdim P (gsize D)))
                     else Err NotDivisible
                 end
          end
      end
  | DynSlice d xs =>
      match nth_error t d with
      | None => Err (BadDim d)
      | Some D =>
          match xs with
          | [] => Err NoAxes
          | _ =>
              match find (fun a => length m <=? a) xs with
              | Some a => Err (AxisOutOfRange a)
              | None =>
                  if negb (nodupb xs) then Err RepeatedAxis else
                  match find (fun a => memb a (used t)) xs with
                  | Some a => Err (AxisInUse a)
                  | None =>
                      if split_okb (nprod m xs) (ucsize m D) (gsize D)
                      then Ok (set_nth t d (mkdim (axes D ++ xs) (gsize D)))
                      else Err NotDivisible
                  end
              end
          end
      end
  | AllToAll d e xs =>
      if d =? e then Err SameDim else
      match nth_error t d, nth_error t e with
      | None, _ => Err (BadDim d)
      | _, None => Err (BadDim e)
      | Some D, Some E =>
          match xs with
          | [] => Err NoAxes
          | _ => match strip_suffix xs (axes D) with
                 | None => Err NotMinorAxes
                 | Some P =>
                     if split_okb (nprod m xs) (ucsize m (mkdim P (gsize D))) (gsize D)
                        && split_okb (nprod m xs) (ucsize m E) (gsize E)
                     then Ok (set_nth (set_nth t d (mkdim P (gsize D))) e (mkdim (axes E ++ xs) (gsize E)))
                     else Err NotDivisible
                 end
          end
      end
  | AllPermute t' =>
      if negb (wf_unevenb m t') then Err BadTarget
      else if nat_list_eqb (map gsize t') (map gsize t) && nat_list_eqb (dnprods m t') (dnprods m t)
      then Ok t' else Err ShapeChanged
  end.

(** * Data movement on padded buffers *)

(** [Uneven.usource], and for a permute the device [Permute.perm_src]
    (which holds, under [t], the block numbers device [c] needs under [t'])
    sends position [i] to position [i]. *)
Definition usrc (m : mesh) (t : atype) (op : coll) (t' : atype) (c : coords) (i : list nat)
  : option (coords * list nat) :=
  match op with
  | AllPermute _ => Some (perm_src m t t' c, i)
  | _ => usource m t op t' c i
  end.

(** One step on padded buffers: read where [usrc] says, fresh padding where it says none. *)
Definition umove {V} (pad : V) (m : mesh) (t : atype) (op : coll) (t' : atype)
  (x : coords -> list nat -> V) : coords -> list nat -> V :=
  fun c i => match usrc m t op t' c i with Some (c', i') => x c' i' | None => pad end.

(** A plan run on padded buffers, step by step along the types [uapply] gives. *)
Fixpoint uexec {V} (pad : V) (m : mesh) (t : atype) (p : plan) (x : coords -> list nat -> V)
  : coords -> list nat -> V :=
  match p with
  | [] => x
  | op :: p' =>
      match uapply m t op with
      | Ok t1 => uexec pad m t1 p' (umove pad m t op t1 x)
      | Err _ => x
      end
  end.

(** * Reports *)

(** Elements one device receives in a step on padded buffers: a gather
    receives [N - 1] padded input blocks; an all-to-all [N - 1] pieces, each
    the input block with dimension [e] cut to its output block size; a
    permute one whole buffer when some device's block changes. *)
Definition urecv (m : mesh) (t : atype) (c : coll) (t' : atype) : nat :=
  match c with
  | AllGather _ xs => (nprod m xs - 1) * usize_padded m t
  | DynSlice _ _ => 0
  | AllToAll _ e xs => (nprod m xs - 1) * usize_padded m (set_nth t e (nth e t' dflt))
  | AllPermute _ => if moves m t t' then usize_padded m t else 0
  end.

Inductive utrace (m : mesh) : atype -> plan -> list atype -> list nat -> Prop :=
| utrace_nil : forall t, utrace m t [] [t] []
| utrace_cons : forall t c t1 p ts rs,
    ucstep m t c t1 -> utrace m t1 p ts rs -> utrace m t (c :: p) (t :: ts) (urecv m t c t1 :: rs).

(** Peak memory: the largest padded buffer along the way (what the padded
    convention allocates on every device; the chunked one allocates at most
    this, and exactly this on rank 0, [Unevenproof.usize_max_padded]). *)
Definition upeak_of (m : mesh) (ts : list atype) : nat :=
  fold_right (fun t acc => Nat.max (usize_padded m t) acc) 0 ts.

Fixpoint urun (m : mesh) (t : atype) (p : plan) (i : nat) : result (nat * error) (list atype * list nat) :=
  match p with
  | [] => Ok ([t], [])
  | c :: p' =>
      match uapply m t c with
      | Err e => Err (i, e)
      | Ok t1 =>
          match urun m t1 p' (S i) with
          | Err x => Err x
          | Ok (ts, rs) => Ok (t :: ts, urecv m t c t1 :: rs)
          end
      end
  end.

Record ureport := mkureport { utypes : list atype; upeak : nat; ureceived : list nat }.

Definition uproblem_error (m : mesh) (src dst : atype) : option error :=
  problem_error_with wf_unevenb (map gsize) m src dst.

Definition uvalid_problem (m : mesh) (src dst : atype) : Prop :=
  wf_uneven m src /\ wf_uneven m dst /\ map gsize src = map gsize dst.

(** Check a plan over uneven types from [src] to [dst]; steps numbered as in [check]. *)
Definition ucheck (m : mesh) (src dst : atype) (p : plan) : result (nat * error) ureport :=
  match uproblem_error m src dst with Some e => Err (0, e) | None =>
  match urun m src p 1 with
  | Err x => Err x
  | Ok (ts, rs) =>
      if atype_eqb (last ts src) dst
      then Ok (mkureport ts (upeak_of m ts) rs)
      else Err (length p, WrongResult)
  end end.

(** The honest memory figure of an uneven problem: the larger padded buffer
    of the two ends. Plans are not always within it (see
    [tests/test_uneven.py] for how often the brute-force minimum exceeds it). *)
Definition ubound (m : mesh) (src dst : atype) : nat := Nat.max (usize_padded m src) (usize_padded m dst).

(** The padded data movement of one step as a table, for tests of the
    runtimes: for every rank and every row-major position of its padded
    output buffer, the rank and row-major padded input offset it is read
    from ([usrc]), or [ndevices m] and 0 where the step writes fresh padding. *)
Definition umovement (m : mesh) (t : atype) (op : coll) (t' : atype) : list nat :=
  flat_map (fun r =>
    flat_map (fun i => match usrc m t op t' (coords_of_rank m r) i with
                       | Some (c', i') => [rank m c'; offset (map (ucsize m) t) i']
                       | None => [ndevices m; 0]
                       end)
             (row_major (map (ucsize m) t')))
    (seq 0 (ndevices m)).
