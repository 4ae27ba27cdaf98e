(** Plans carried to a split of the mesh, every axis replaced by its
    sub-axes ([Refine.grp]), on splits without sub-axes of size 1 (an axis
    of size 1, which shards nothing, then has none). A plan the checker
    accepts over the mesh is carried to one accepted over the split, through
    the refined types, with no higher peak and no more traffic
    ([refine_check]): a lower bound on the traffic of plans over the split
    bounds the plans over the mesh too. A step over axes of size 1 alone, or
    a permute that moves nothing, leaves the refined type as it is, and is
    left out. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Traffic Refine Certify.
Import ListNotations.

Definition rcoll (fs : split) (c : coll) : coll :=
  match c with
  | AllGather d xs => AllGather d (flat_map (grp fs) xs)
  | DynSlice d xs => DynSlice d (flat_map (grp fs) xs)
  | AllToAll d e xs => AllToAll d e (flat_map (grp fs) xs)
  | AllPermute t => AllPermute (rtype fs t)
  end.

Lemma strip1_id : forall m A, (forall a, In a A -> asize m a <> 1) -> strip1 m A = A.
Proof.
  intros m A H. unfold strip1. induction A as [|a A IH]; simpl; auto.
  replace (asize m a =? 1) with false by (symmetry; apply Nat.eqb_neq, H; left; reflexivity).
  simpl. f_equal. apply IH. intros b Hb. apply H. right. exact Hb.
Qed.

Lemma no_unit_axes_spec : forall m a, no_unit_axes m = true -> a < length m -> asize m a <> 1.
Proof.
  intros m a H Ha. unfold no_unit_axes in H. rewrite forallb_forall in H.
  rewrite asize_nth. specialize (H (nth a m 1) (nth_In m 1 Ha)). apply Nat.leb_le in H. lia.
Qed.

Lemma wf_tail : forall m D t, wf m (D :: t) -> wf m t.
Proof.
  intros m D t [Hm [HF Hnd]]. split; [exact Hm|]. split; [eapply Forall_inv_tail; eauto|].
  unfold used in Hnd. cbn [flat_map] in Hnd. eapply nodup_app_r; eauto.
Qed.

(** A permute that moves nothing leaves the type as it is. *)
Lemma unmoved_same : forall m t t', no_unit_axes m = true -> wf m t -> wf m t' ->
  map gsize t' = map gsize t -> Checker.moves m t t' = false -> t' = t.
Proof.
  intros m t. unfold Checker.moves. induction t as [|D t IH]; intros [|D' t'] Hu Ht Ht' Hg Hmv;
    simpl in Hmv, Hg; try discriminate; auto.
  apply orb_false_iff in Hmv as [H1 H2]. apply negb_false_iff, nat_list_eqb_spec in H1.
  injection Hg as Hg1 Hg2.
  assert (HA : forall u E, wf m u -> In E u -> strip1 m (axes E) = axes E).
  { intros u E Hw HE. apply strip1_id. intros a Ha. apply no_unit_axes_spec; auto.
    eapply wf_axes_range; eauto. }
  rewrite (HA _ D Ht), (HA _ D' Ht') in H1 by (left; reflexivity).
  rewrite (IH t'); auto; [|eapply wf_tail; eauto|eapply wf_tail; eauto].
  destruct D, D'. cbn in *. subst. reflexivity.
Qed.

Lemma moves_refl : forall m t, Checker.moves m t t = false.
Proof.
  intros m t. unfold Checker.moves. induction t as [|D t IH]; simpl; auto.
  replace (nat_list_eqb (strip1 m (axes D)) (strip1 m (axes D))) with true
    by (symmetry; apply nat_list_eqb_spec; reflexivity). exact IH.
Qed.

Lemma nth_error_rtype : forall fs t d D, nth_error t d = Some D -> nth_error (rtype fs t) d = Some (rdim fs D).
Proof. intros fs t d D H. unfold rtype. rewrite nth_error_map, H. reflexivity. Qed.

Lemma rtype_set_nth : forall fs t d D, rtype fs (set_nth t d D) = set_nth (rtype fs t) d (rdim fs D).
Proof. intros. unfold rtype. apply map_set_nth. Qed.

Lemma dim_range : forall m t d D, wf m t -> nth_error t d = Some D -> forall a, In a (axes D) -> a < length m.
Proof. intros m t d D Ht H. eapply wf_axes_range; [exact Ht|]. eapply nth_error_In; eauto. Qed.


Lemma in_rmesh_ge2 : forall fs a x, no_unit_axes (rmesh fs) = true -> In x (nth a fs []) -> 2 <= x.
Proof.
  intros fs a x H Hx. unfold no_unit_axes, rmesh in H. rewrite forallb_forall in H.
  apply Nat.leb_le, H, in_concat. exists (nth a fs []). split; auto.
  destruct (Nat.lt_ge_cases a (length fs)) as [Ha|Ha]; [apply nth_In, Ha|].
  rewrite nth_overflow in Hx by exact Ha. contradiction.
Qed.

Lemma prod_ge2 : forall l, l <> [] -> (forall x, In x l -> 2 <= x) -> 2 <= prod l.
Proof.
  induction l as [|x l IH]; intros Hne H; [congruence|]. cbn [prod fold_right].
  assert (Hx : 2 <= x) by (apply H; left; reflexivity).
  destruct l as [|y l]; [cbn; lia|]. fold (prod (y :: l)).
  assert (2 <= prod (y :: l)) by (apply IH; [discriminate|intros z Hz; apply H; right; exact Hz]). nia.
Qed.

(** On such a split an axis has no sub-axis exactly when it has size 1. *)
Lemma grp_nil_unit : forall m fs a, splits m fs -> no_unit_axes (rmesh fs) = true ->
  (grp fs a = [] <-> asize m a = 1).
Proof.
  intros m fs a Hs Hu. rewrite (splits_asize m fs a Hs). unfold grp.
  destruct (nth a fs []) as [|x l] eqn:E; cbn [length seq]; split; intros H; auto; try discriminate.
  exfalso. assert (2 <= prod (x :: l)) by (apply prod_ge2; [discriminate|intros y Hy; apply (in_rmesh_ge2 fs a); auto; rewrite E; exact Hy]).
  lia.
Qed.

Lemma flat_grp_strip1 : forall m fs A, splits m fs -> no_unit_axes (rmesh fs) = true ->
  flat_map (grp fs) A = flat_map (grp fs) (strip1 m A).
Proof.
  intros m fs A Hs Hu. unfold strip1. induction A as [|a A IH]; [reflexivity|]. cbn [filter].
  destruct (asize m a =? 1) eqn:E; cbn [negb flat_map].
  - apply Nat.eqb_eq, (grp_nil_unit m fs a Hs Hu) in E. rewrite E. exact IH.
  - rewrite IH. reflexivity.
Qed.

Lemma rtype_unmoved : forall m fs t t', splits m fs -> no_unit_axes (rmesh fs) = true ->
  map gsize t' = map gsize t -> Checker.moves m t t' = false -> rtype fs t' = rtype fs t.
Proof.
  intros m fs t t' Hs Hu. unfold Checker.moves.
  revert t'. induction t as [|D t IH]; intros [|D' t'] Hg Hmv; simpl in Hg, Hmv; try discriminate; auto.
  apply orb_false_iff in Hmv as [H1 H2]. apply negb_false_iff, nat_list_eqb_spec in H1.
  injection Hg as Hg1 Hg2. cbn [rtype map]. fold (rtype fs t) (rtype fs t'). rewrite (IH t'); auto.
  f_equal. unfold rdim. rewrite (flat_grp_strip1 m fs (axes D')), (flat_grp_strip1 m fs (axes D)), H1, Hg1 by auto.
  reflexivity.
Qed.

Lemma nprod_unit : forall m fs xs, splits m fs -> (forall a, In a xs -> a < length m) ->
  flat_map (grp fs) xs = [] -> nprod m xs = 1.
Proof. intros m fs xs Hs Hr E. rewrite <- (nprod_flat_grp m fs xs Hs Hr), E. reflexivity. Qed.

(** One step, carried to the split: accepted there, receiving no more, or
    (axes of size 1 alone; a permute moving nothing) receiving nothing and
    leaving the refined type as it is. *)
Lemma refine_step : forall m fs t c t', splits m fs -> no_unit_axes (rmesh fs) = true -> wf m t ->
  step m t c t' ->
  (step (rmesh fs) (rtype fs t) (rcoll fs c) (rtype fs t') /\
   recv (rmesh fs) (rtype fs t) (rcoll fs c) (rtype fs t') <= recv m t c t')
  \/ (rtype fs t' = rtype fs t /\ recv m t c t' = 0).
Proof.
  intros m fs t c t' Hs Hu Ht Hst. pose proof Ht as [Hm _].
  assert (Hsz : size (rmesh fs) (rtype fs t) = size m t) by (apply (refine_size m); auto).
  destruct Hst as [d xs P g H Hxs|d xs D H Hxs Hr Hnxs Hus Hdv|d e xs P g E Hde H HE Hxs Hdv|t1 Ht1 Hg Hl].
  - (* gather *)
    assert (HA := dim_range m t d _ Ht H). cbn [axes] in HA.
    assert (Hxr : forall a, In a xs -> a < length m) by (intros a Ha; apply HA, in_or_app; right; exact Ha).
    rewrite rtype_set_nth. cbn [rcoll].
    replace (rdim fs (mkdim P g)) with (mkdim (flat_map (grp fs) P) g) by reflexivity.
    assert (HrD : nth_error (rtype fs t) d = Some (mkdim (flat_map (grp fs) P ++ flat_map (grp fs) xs) g))
      by (rewrite (nth_error_rtype fs t d _ H); unfold rdim; cbn [axes gsize]; rewrite flat_map_app; reflexivity).
    destruct (flat_map (grp fs) xs) as [|x xs'] eqn:Ex.
    + right. split.
      * apply set_nth_same. rewrite app_nil_r in HrD. exact HrD.
      * cbn [recv]. rewrite (nprod_unit m fs xs Hs Hxr Ex). lia.
    + left. rewrite <- Ex in HrD |- *. split.
      * apply step_gather; [exact HrD|rewrite Ex; discriminate].
      * cbn [recv]. rewrite Hsz, (nprod_flat_grp m) by auto. lia.
  - (* slice *)
    assert (HA := dim_range m t d _ Ht H).
    rewrite rtype_set_nth. cbn [rcoll].
    replace (rdim fs (mkdim (axes D ++ xs) (gsize D)))
      with (mkdim (axes (rdim fs D) ++ flat_map (grp fs) xs) (gsize (rdim fs D)))
      by (unfold rdim; cbn [axes gsize]; rewrite flat_map_app; reflexivity).
    destruct (flat_map (grp fs) xs) as [|x xs'] eqn:Ex.
    + right. split; [|reflexivity]. rewrite app_nil_r. apply set_nth_same.
      rewrite (nth_error_rtype fs t d _ H). destruct D. reflexivity.
    + left. rewrite <- Ex. split; [|cbn [recv]; lia].
      apply step_slice.
      * apply (nth_error_rtype fs t d _ H).
      * rewrite Ex. discriminate.
      * intros y Hy. apply in_flat_map in Hy as [a [Ha Hy]]. apply (grp_lt m fs a); auto.
      * apply (nodup_flat_grp m); auto.
      * intros y Hy Hin. rewrite used_rtype in Hin.
        apply in_flat_map in Hy as [a [Ha Hya]]. apply in_flat_map in Hin as [b [Hb Hyb]].
        assert (Hbr : b < length m).
        { unfold used in Hb. apply in_flat_map in Hb as [D' [HD' Hb]]. eapply wf_axes_range; eauto. }
        destruct (Nat.eq_dec a b) as [<-|Hab].
        -- exact (Hus a Ha Hb).
        -- exact (grp_disjoint m fs a b y Hs (Hr a Ha) Hbr Hab Hya Hyb).
      * rewrite (nprod_flat_grp m), (refine_lsize m) by auto. exact Hdv.
  - (* all-to-all *)
    assert (HA := dim_range m t d _ Ht H). cbn [axes] in HA.
    assert (HAE := dim_range m t e _ Ht HE).
    assert (Hxr : forall a, In a xs -> a < length m) by (intros a Ha; apply HA, in_or_app; right; exact Ha).
    rewrite !rtype_set_nth. cbn [rcoll].
    replace (rdim fs (mkdim (axes E ++ xs) (gsize E)))
      with (mkdim (axes (rdim fs E) ++ flat_map (grp fs) xs) (gsize (rdim fs E)))
      by (unfold rdim; cbn [axes gsize]; rewrite flat_map_app; reflexivity).
    replace (rdim fs (mkdim P g)) with (mkdim (flat_map (grp fs) P) g) by reflexivity.
    assert (HrD : nth_error (rtype fs t) d = Some (mkdim (flat_map (grp fs) P ++ flat_map (grp fs) xs) g))
      by (rewrite (nth_error_rtype fs t d _ H); unfold rdim; cbn [axes gsize]; rewrite flat_map_app; reflexivity).
    destruct (flat_map (grp fs) xs) as [|x xs'] eqn:Ex.
    + right. split.
      * rewrite app_nil_r. rewrite app_nil_r in HrD. rewrite (set_nth_same _ _ d _ HrD).
        apply set_nth_same. rewrite (nth_error_rtype fs t e _ HE). destruct E. reflexivity.
      * cbn [recv]. rewrite (nprod_unit m fs xs Hs Hxr Ex), Nat.div_1_r. lia.
    + left. rewrite <- Ex in HrD |- *. split.
      * apply step_alltoall; [exact Hde|exact HrD|apply (nth_error_rtype fs t e _ HE)|rewrite Ex; discriminate|].
        rewrite (nprod_flat_grp m), (refine_lsize m) by auto. exact Hdv.
      * cbn [recv]. rewrite Hsz, (nprod_flat_grp m) by auto. lia.
  - (* permute *)
    destruct (Checker.moves m t t1) eqn:Hmv.
    + left. split.
      * cbn [rcoll]. apply step_permute.
        -- apply (refine_wf m); auto.
        -- rewrite !refine_gsizes. exact Hg.
        -- rewrite !(refine_sizes m) by auto. exact Hl.
      * cbn [recv rcoll]. rewrite Hmv. destruct (Checker.moves (rmesh fs) (rtype fs t) (rtype fs t1)); lia.
    + right. split; [apply (rtype_unmoved m); auto|]. cbn [recv]. rewrite Hmv. reflexivity.
Qed.

(** A trace carried to the split: from the refined type, to the refinement of
    where it ends, through refinements of its types, receiving no more. *)
Lemma refine_trace : forall m fs t p ts rs, splits m fs -> no_unit_axes (rmesh fs) = true -> wf m t ->
  trace m t p ts rs ->
  exists p' ts' rs', trace (rmesh fs) (rtype fs t) p' ts' rs' /\ traffic rs' <= traffic rs /\
    last ts' (rtype fs t) = rtype fs (last ts t) /\ (forall u, In u ts' -> exists v, In v ts /\ u = rtype fs v).
Proof.
  intros m fs t p ts rs Hs Hu Ht Htr. revert Ht.
  induction Htr as [t|t c t1 p ts rs Hst Htr IH]; intros Ht.
  - exists [], [rtype fs t], []. split; [constructor|]. split; [cbn; lia|]. split; [reflexivity|].
    intros u [<-|[]]. exists t. split; [left|]; reflexivity.
  - destruct (IH (step_wf m t c t1 Ht Hst)) as [p' [ts' [rs' [Htr' [Hle [Hl Hin]]]]]].
    assert (Hne := trace_nonempty _ _ _ _ _ Htr).
    assert (Hne' := trace_nonempty _ _ _ _ _ Htr').
    assert (Hlast : last (t :: ts) t = last ts t1)
      by (rewrite last_cons_ne by exact Hne; apply last_indep, Hne).
    cbn [traffic fold_right]. fold (traffic rs).
    destruct (refine_step m fs t c t1 Hs Hu Ht Hst) as [[Hst' Hr]|[Heq Hr0]].
    + exists (rcoll fs c :: p'), (rtype fs t :: ts'), (recv (rmesh fs) (rtype fs t) (rcoll fs c) (rtype fs t1) :: rs').
      split; [constructor; auto|]. split; [cbn [traffic fold_right]; fold (traffic rs'); lia|]. split.
      * rewrite last_cons_ne by exact Hne'. rewrite (last_indep _ ts' _ (rtype fs t1)) by exact Hne'.
        rewrite Hl, Hlast. reflexivity.
      * intros u [<-|Hu']; [exists t; split; [left|]; reflexivity|].
        destruct (Hin u Hu') as [v [Hv ->]]. exists v. split; [right|]; auto.
    + rewrite Heq in Htr', Hl. exists p', ts', rs'. split; [exact Htr'|]. split; [lia|]. split.
      * rewrite Hl, Hlast. reflexivity.
      * intros u Hu'. destruct (Hin u Hu') as [v [Hv ->]]. exists v. split; [right|]; auto.
Qed.

(** A plan the checker accepts over the mesh is carried to one accepted over
    the split, peaking no higher and receiving no more. *)
Theorem refine_check : forall m fs src dst p r, splits m fs -> no_unit_axes (rmesh fs) = true ->
  check m src dst p = Ok r ->
  exists p' r', check (rmesh fs) (rtype fs src) (rtype fs dst) p' = Ok r' /\
    peak r' <= peak r /\ traffic (received r') <= traffic (received r).
Proof.
  intros m fs src dst p r Hs Hu Hc. apply check_ok_iff in Hc as [[Hsrc [Hdst Hg]] [Htr [Hl Hp]]].
  destruct (refine_trace m fs src p (types r) (received r) Hs Hu Hsrc Htr) as [p' [ts' [rs' [Htr' [Hle [Hl' Hin]]]]]].
  exists p', (mkreport ts' (peak_of (rmesh fs) ts') rs'). split; [|split].
  - apply check_ok_iff. cbn [types received peak]. split; [|split; [exact Htr'|split; [|reflexivity]]].
    + split; [apply (refine_wf m); auto|split; [apply (refine_wf m); auto|]].
      rewrite !refine_gsizes. exact Hg.
    + rewrite Hl', Hl. reflexivity.
  - cbn [peak]. rewrite Hp. pose proof (trace_wf_all m src p _ _ Htr Hsrc) as Hw. rewrite Forall_forall in Hw.
    clear -Hin Hw Hs. induction ts' as [|u ts' IH]; cbn [peak_of fold_right]; [lia|].
    fold (peak_of (rmesh fs) ts'). apply Nat.max_lub.
    + destruct (Hin u (or_introl eq_refl)) as [v [Hv ->]]. rewrite (refine_size m) by auto.
      apply peak_of_ge, Hv.
    + apply IH. intros w Hw'. apply Hin. right. exact Hw'.
  - exact Hle.
Qed.
