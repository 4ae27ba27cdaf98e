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

(** The same global and local sizes, dimension by dimension ([same_shape_spec]). *)
Fixpoint same_shape (m : mesh) (t t' : atype) : bool :=
  match t, t' with
  | [], [] => true
  | D :: u, D' :: u' => (gsize D' =? gsize D) && (lsize m D' =? lsize m D) && same_shape m u u'
  | _, _ => false
  end.

Lemma same_shape_spec : forall m t t', same_shape m t t' = true <->
  map gsize t' = map gsize t /\ map (lsize m) t' = map (lsize m) t.
Proof.
  intros m t. induction t as [|D u IH]; intros [|D' u']; simpl; try (split; [discriminate|intros [H _]; discriminate]).
  - split; auto.
  - rewrite !andb_true_iff, !Nat.eqb_eq, IH. split.
    + intros [[E1 E2] [E3 E4]]. rewrite E1, E2, E3, E4. auto.
    + intros [E1 E2]. inversion E1. inversion E2. auto.
Qed.

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

(** Helpers for [step_wf]: how [used] changes under [set_nth]. *)
Lemma used_set_nth_perm : forall t d D D', nth_error t d = Some D ->
  Permutation (axes D ++ used (set_nth t d D')) (axes D' ++ used t).
Proof.
  intros t d D D' H. apply nth_error_split in H as [L [R [-> <-]]].
  rewrite set_nth_app_mid, !used_app, !used_cons.
  eapply perm_trans; [apply Permutation_app_head, Permutation_app_swap_app|].
  eapply perm_trans; [apply Permutation_app_swap_app|].
  apply Permutation_app_head, Permutation_app_swap_app.
Qed.

Lemma mod_nprod_divide : forall m xs n, wf_mesh m -> (forall a, In a xs -> a < length m) ->
  (n mod nprod m xs = 0 <-> Nat.divide (nprod m xs) n).
Proof.
  intros m xs n Hm Hxs. apply Nat.mod_divide. pose proof (nprod_pos m xs Hm Hxs). lia.
Qed.

(** Well-formedness is preserved by every rule. *)
Theorem step_wf : forall m t c t', wf m t -> step m t c t' -> wf m t'.
Proof.
  intros m t c t' Hwf Hs. pose proof Hwf as [Hm [HF Hnd]].
  destruct Hs as [d xs P g H Hxs|d xs D H Hxs Hr Hnxs Hu Hdv|d e xs P g E Hde H HE Hxs Hdv|t1 Hwf1 _ _].
  - (* gather *)
    pose proof (wf_nth m t d _ Hwf H) as [Hg [Ha Hdg]]. simpl in Hg, Ha, Hdg.
    split; [exact Hm|split].
    + apply Forall_set_nth; auto. unfold wf_dim; simpl. repeat split; auto.
      * intros a Hin. apply Ha, in_or_app; auto.
      * rewrite nprod_app in Hdg. eapply Nat.divide_trans; [apply Nat.divide_factor_l|exact Hdg].
    + pose proof (used_set_nth_perm t d _ (mkdim P g) H) as Hp. simpl in Hp.
      rewrite <- app_assoc in Hp. apply Permutation_app_inv_l, Permutation_sym in Hp.
      apply (Permutation_NoDup Hp) in Hnd. eapply nodup_app_r; eauto.
  - (* slice *)
    pose proof (wf_nth m t d _ Hwf H) as HD.
    split; [exact Hm|split].
    + apply Forall_set_nth; auto. destruct HD as [Hg [Ha Hdg]].
      unfold wf_dim; simpl. repeat split; auto.
      * intros a Hin. apply in_app_or in Hin as [Hin|Hin]; auto.
      * apply nprod_app_divide; auto. split; auto.
    + pose proof (used_set_nth_perm t d D (mkdim (axes D ++ xs) (gsize D)) H) as Hp. simpl in Hp.
      rewrite <- app_assoc in Hp. apply Permutation_app_inv_l, Permutation_sym in Hp.
      apply (Permutation_NoDup Hp). apply nodup_app_intro; auto.
  - (* all-to-all *)
    pose proof (wf_nth m t d _ Hwf H) as [Hg [Ha Hdg]]. simpl in Hg, Ha, Hdg.
    pose proof (wf_nth m t e _ Hwf HE) as HEw.
    set (t1 := set_nth t d (mkdim P g)).
    assert (HE1 : nth_error t1 e = Some E) by (unfold t1; rewrite nth_error_set_nth_neq; auto).
    split; [exact Hm|split].
    + apply Forall_set_nth; [apply Forall_set_nth; auto|].
      * unfold wf_dim; simpl. repeat split; auto.
        -- intros a Hin. apply Ha, in_or_app; auto.
        -- rewrite nprod_app in Hdg. eapply Nat.divide_trans; [apply Nat.divide_factor_l|exact Hdg].
      * pose proof HEw as [HgE [HaE HdE]]. unfold wf_dim; simpl. repeat split; auto.
        -- intros a Hin. apply in_app_or in Hin as [Hin|Hin]; auto. apply Ha, in_or_app; auto.
        -- apply nprod_app_divide; auto.
    + pose proof (used_set_nth_perm t d _ (mkdim P g) H) as Hp1. simpl in Hp1. fold t1 in Hp1.
      rewrite <- app_assoc in Hp1. apply Permutation_app_inv_l in Hp1.
      pose proof (used_set_nth_perm t1 e E (mkdim (axes E ++ xs) (gsize E)) HE1) as Hp2. simpl in Hp2.
      rewrite <- app_assoc in Hp2. apply Permutation_app_inv_l in Hp2.
      apply (Permutation_NoDup (Permutation_sym (perm_trans Hp2 Hp1))). exact Hnd.
  - (* permute *)
    exact Hwf1.
Qed.

(** The function decides the relation. *)
Theorem apply_sound : forall m t c t', wf m t -> apply m t c = Ok t' -> step m t c t'.
Proof.
  intros m t c t1 Hwf H. pose proof Hwf as [Hm [HF Hnd]].
  destruct c as [d xs|d xs|d e xs|t'].
  - (* gather *)
    cbn [apply] in H. destruct (nth_error t d) as [D|] eqn:HD; [|discriminate].
    destruct xs as [|x xs']; [discriminate|].
    destruct (strip_suffix (x :: xs') (axes D)) as [P|] eqn:HS; [|discriminate].
    inversion H; subst t1. apply strip_suffix_spec in HS.
    destruct D as [A g]; simpl in HS |- *; subst A.
    apply step_gather; auto. discriminate.
  - (* slice *)
    cbn [apply] in H. destruct (nth_error t d) as [D|] eqn:HD; [|discriminate].
    destruct xs as [|x xs']; [discriminate|].
    destruct (find (fun a => length m <=? a) (x :: xs')) as [a|] eqn:F1; [discriminate|].
    destruct (nodupb (x :: xs')) eqn:ND; cbn [negb] in H; [|discriminate].
    destruct (find (fun a => memb a (used t)) (x :: xs')) as [a|] eqn:F2; [discriminate|].
    assert (Hr : forall a, In a (x :: xs') -> a < length m).
    { intros a Ha. pose proof (find_none _ _ F1 a Ha) as Hf. cbv beta in Hf. apply Nat.leb_gt in Hf. exact Hf. }
    destruct (lsize m D mod nprod m (x :: xs') =? 0) eqn:Hmod; [|discriminate].
    inversion H; subst t1. apply step_slice; auto.
    + discriminate.
    + apply nodupb_spec; auto.
    + intros a Ha Hu. pose proof (find_none _ _ F2 a Ha) as Hf. cbv beta in Hf.
      apply memb_spec in Hu. congruence.
    + apply Nat.eqb_eq in Hmod. apply mod_nprod_divide; auto.
  - (* all-to-all *)
    cbn [apply] in H. destruct (Nat.eqb_spec d e) as [|Hde]; [discriminate|].
    destruct (nth_error t d) as [D|] eqn:HD; [|discriminate].
    destruct (nth_error t e) as [E|] eqn:HE; [|discriminate].
    destruct xs as [|x xs']; [discriminate|].
    destruct (strip_suffix (x :: xs') (axes D)) as [P|] eqn:HS; [|discriminate].
    destruct (lsize m E mod nprod m (x :: xs') =? 0) eqn:Hmod; [|discriminate].
    inversion H; subst t1. apply strip_suffix_spec in HS.
    pose proof (wf_nth m t d D Hwf HD) as [_ [Ha _]].
    destruct D as [A g]; simpl in HS, Ha |- *; subst A.
    apply step_alltoall; auto.
    + discriminate.
    + apply Nat.eqb_eq in Hmod. apply mod_nprod_divide in Hmod; auto.
      intros a Hin. apply Ha, in_or_app; auto.
  - (* permute *)
    cbn [apply] in H. destruct (wfb m t') eqn:Hw; cbn [negb] in H; [|discriminate].
    destruct (same_shape m t t') eqn:Hsh; [|discriminate].
    inversion H; subst t1. apply same_shape_spec in Hsh as [H1 H2].
    apply step_permute; auto. apply wfb_spec; auto.
Qed.

Theorem apply_complete : forall m t c t', wf m t -> step m t c t' -> apply m t c = Ok t'.
Proof.
  intros m t c t1 Hwf Hs. pose proof Hwf as [Hm [HF Hnd]].
  destruct Hs as [d xs P g H Hxs|d xs D H Hxs Hr Hnxs Hu Hdv|d e xs P g E Hde H HE Hxs Hdv|t' Hwf' H1 H2].
  - (* gather *)
    destruct xs as [|x xs']; [congruence|].
    assert (HS : strip_suffix (x :: xs') (P ++ x :: xs') = Some P) by (apply strip_suffix_spec; auto).
    simpl. rewrite H. simpl. rewrite HS. reflexivity.
  - (* slice *)
    destruct xs as [|x xs']; [congruence|].
    assert (F1 : find (fun a => length m <=? a) (x :: xs') = None).
    { apply find_none_intro. intros a Ha. apply Nat.leb_gt, Hr, Ha. }
    assert (F2 : find (fun a => memb a (used t)) (x :: xs') = None).
    { apply find_none_intro. intros a Ha. destruct (memb a (used t)) eqn:E; auto.
      apply memb_spec in E. exfalso. apply (Hu a); auto. }
    assert (ND : nodupb (x :: xs') = true) by (apply nodupb_spec; auto).
    assert (Hmod : lsize m D mod nprod m (x :: xs') = 0) by (apply mod_nprod_divide; auto).
    cbn [apply]. rewrite H. rewrite F1, ND, F2. cbn [negb]. rewrite Hmod. reflexivity.
  - (* all-to-all *)
    destruct xs as [|x xs']; [congruence|].
    assert (HS : strip_suffix (x :: xs') (P ++ x :: xs') = Some P) by (apply strip_suffix_spec; auto).
    pose proof (wf_nth m t d _ Hwf H) as [_ [Ha _]]. simpl in Ha.
    assert (Hmod : lsize m E mod nprod m (x :: xs') = 0).
    { apply mod_nprod_divide; auto. intros a Hin. apply Ha, in_or_app; auto. }
    cbn [apply]. destruct (Nat.eqb_spec d e) as [|_]; [contradiction|].
    rewrite H, HE. cbn [axes gsize]. rewrite HS, Hmod. reflexivity.
  - (* permute *)
    cbn [apply]. apply wfb_spec in Hwf'. rewrite Hwf'. cbn [negb].
    replace (same_shape m t t') with true by (symmetry; apply same_shape_spec; auto). reflexivity.
Qed.

Corollary apply_spec : forall m t c t', wf m t -> (apply m t c = Ok t' <-> step m t c t').
Proof. split; [apply apply_sound|apply apply_complete]; auto. Qed.
