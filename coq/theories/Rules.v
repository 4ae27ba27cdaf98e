(** The four collectives and their typing rules: an inductive relation and an
    executable function proved equivalent to it. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types.
Import ListNotations.

(** Axis lists are given explicitly so that a plan says which axes it moves. *)
Inductive coll :=
| AllGather (d : nat) (xs : list nat)         (* remove the minor axes [xs] of dim [d] *)
| DynSlice (d : nat) (xs : list nat)          (* append replicated axes [xs] to dim [d] *)
| AllToAll (d e : nat) (xs : list nat)        (* move the minor axes [xs] of [d] to the minor end of [e] *)
| AllPermute (t' : atype).                   (* same local shape, any layout *)

Inductive step (m : mesh) (t : atype) : coll -> atype -> Prop :=
| step_gather : forall d xs P g,
    nth_error t d = Some (mkdim (P ++ xs) g) -> xs <> [] ->
    step m t (AllGather d xs) (set_nth t d (mkdim P g))
| step_slice : forall d xs D,
    nth_error t d = Some D -> xs <> [] ->
    (forall a, In a xs -> a < length m) -> NoDup xs ->
    (forall a, In a xs -> ~ In a (used t)) ->
    Nat.divide (nprod m xs) (lsize m D) ->
    step m t (DynSlice d xs) (set_nth t d (mkdim (axes D ++ xs) (gsize D)))
| step_alltoall : forall d e xs P g E,
    d <> e -> nth_error t d = Some (mkdim (P ++ xs) g) -> nth_error t e = Some E -> xs <> [] ->
    Nat.divide (nprod m xs) (lsize m E) ->
    step m t (AllToAll d e xs)
         (set_nth (set_nth t d (mkdim P g)) e (mkdim (axes E ++ xs) (gsize E)))
| step_permute : forall t',
    wf m t' -> map gsize t' = map gsize t -> map (lsize m) t' = map (lsize m) t ->
    step m t (AllPermute t') t'.

(** Why a step is rejected. *)
Inductive error :=
| BadDim (d : nat)            (* the type has no dimension [d] *)
| NoAxes                      (* the collective names no axes *)
| NotMinorAxes                (* the axes are not the minor end of the dimension *)
| AxisOutOfRange (a : nat)    (* the mesh has no axis [a] *)
| RepeatedAxis                (* an axis is named twice *)
| AxisInUse (a : nat)         (* a sliced axis already shards the array *)
| NotDivisible                (* the group size does not divide the local size *)
| SameDim                     (* all-to-all from a dimension to itself *)
| BadTarget                   (* the permute target is not well formed *)
| ShapeChanged                (* the permute target has another global or local shape *)
| BadMesh                     (* an axis of size 0 *)
| BadSource                   (* the source type is not well formed *)
| BadDest                     (* the target type is not well formed *)
| GlobalShapeMismatch         (* source and target describe different arrays *)
| WrongResult.                (* the plan ends at another type *)

(** [A = P ++ xs] decided, returning [P]. *)
Definition strip_suffix (xs A : list nat) : option (list nat) :=
  let k := length A - length xs in
  if (length xs <=? length A) && nat_list_eqb (skipn k A) xs then Some (firstn k A) else None.

Lemma strip_suffix_spec : forall xs A P, strip_suffix xs A = Some P <-> A = P ++ xs.
Proof.
  intros xs A P. unfold strip_suffix. split.
  - destruct ((length xs <=? length A) && nat_list_eqb (skipn (length A - length xs) A) xs) eqn:E;
      [|congruence].
    intros H. inversion H; subst. apply andb_true_iff in E as [_ E].
    apply nat_list_eqb_spec in E. rewrite <- E at 2. symmetry. apply firstn_skipn.
  - intros ->. rewrite app_length.
    replace (length P + length xs - length xs) with (length P) by lia.
    rewrite skipn_app, firstn_app, skipn_all, Nat.sub_diag, firstn_all, skipn_O, firstn_O, app_nil_r.
    simpl. replace (length xs <=? length P + length xs) with true by (symmetry; apply Nat.leb_le; lia).
    replace (nat_list_eqb xs xs) with true by (symmetry; apply nat_list_eqb_spec; auto). auto.
Qed.

Definition same_shape (m : mesh) (t t' : atype) : bool :=
  nat_list_eqb (map gsize t') (map gsize t) && nat_list_eqb (map (lsize m) t') (map (lsize m) t).

(** The typing rules as a function. *)
Definition apply (m : mesh) (t : atype) (c : coll) : result error atype :=
  match c with
  | AllGather d xs =>
      match nth_error t d with
      | None => Err (BadDim d)
      | Some D =>
          match xs with
          | [] => Err NoAxes
          | _ => match strip_suffix xs (axes D) with
                 | None => Err NotMinorAxes
                 | Some P => Ok (set_nth t d (mkdim P (gsize D)))
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
                      if lsize m D mod nprod m xs =? 0
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
                     if lsize m E mod nprod m xs =? 0
                     then Ok (set_nth (set_nth t d (mkdim P (gsize D))) e (mkdim (axes E ++ xs) (gsize E)))
                     else Err NotDivisible
                 end
          end
      end
  | AllPermute t' =>
      if negb (wfb m t') then Err BadTarget
      else if same_shape m t t' then Ok t' else Err ShapeChanged
  end.

(** Well-formedness is preserved by every rule. *)
Theorem step_wf : forall m t c t', wf m t -> step m t c t' -> wf m t'.
Proof.
Admitted.

(** The function decides the relation. *)
Theorem apply_sound : forall m t c t', wf m t -> apply m t c = Ok t' -> step m t c t'.
Proof.
Admitted.

Theorem apply_complete : forall m t c t', wf m t -> step m t c t' -> apply m t c = Ok t'.
Proof.
Admitted.

Corollary apply_spec : forall m t c t', wf m t -> (apply m t c = Ok t' <-> step m t c t').
Proof. split; [apply apply_sound|apply apply_complete]; auto. Qed.
