(** Soundness of traffic certificates ([Certify.v]): a certificate the
    checker accepts bounds below the traffic of every accepted plan within
    the cap. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Traffic Trafficproof Search Refine Certify Refineplan.
Import ListNotations.

(** * Enumeration *)

Lemma suffixes_complete : forall P xs, xs <> [] -> In xs (suffixes (P ++ xs)).
Proof.
  induction P as [|a P IH]; intros xs Hxs.
  - destruct xs as [|x xs]; [congruence|]. left. reflexivity.
  - right. apply IH, Hxs.
Qed.

Lemma without_In : forall pool xs a, In a (without pool xs) <-> In a pool /\ ~ In a xs.
Proof.
  intros pool xs a. unfold without. rewrite filter_In, negb_true_iff.
  split; intros [H1 H2]; split; auto.
  - intros Hin. apply memb_spec in Hin. congruence.
  - destruct (memb a xs) eqn:E; auto. apply memb_spec in E. contradiction.
Qed.

Lemma arrangements_complete : forall m n N pool xs,
  (forall a, In a xs -> 0 < asize m a) -> length xs <= n -> NoDup xs -> incl xs pool ->
  Nat.divide (nprod m xs) N -> In xs (arrangements m n N pool).
Proof.
  intros m n. induction n as [|n IH]; intros N pool xs Hpos Hlen Hnd Hinc Hdiv.
  - destruct xs; [left; reflexivity|]. simpl in Hlen. lia.
  - destruct xs as [|a xs]; [left; reflexivity|]. right.
    apply in_flat_map. exists a. split; [apply Hinc; left; reflexivity|].
    assert (Ha : 0 < asize m a) by (apply Hpos; left; reflexivity).
    rewrite nprod_cons in Hdiv.
    replace (N mod asize m a =? 0) with true.
    2: { symmetry. apply Nat.eqb_eq, Nat.mod_divide; [lia|].
         eapply Nat.divide_trans; [apply Nat.divide_factor_l|exact Hdiv]. }
    apply in_map. apply NoDup_cons_iff in Hnd as [Hnin Hnd]. apply IH; auto.
    + intros b Hb. apply Hpos. right. exact Hb.
    + simpl in Hlen. lia.
    + intros b Hb. apply without_In. split; [apply Hinc; right; exact Hb|].
      intros [->|[]]. contradiction.
    + apply div_helper; auto.
Qed.

Lemma types_shaped_complete : forall m t pool, wf_mesh m -> Forall (wf_dim m) t -> NoDup (used t) ->
  incl (used t) pool -> In t (types_shaped m (shape_of m t) pool).
Proof.
  intros m t. induction t as [|[A g] t IH]; intros pool Hm HF Hnd Hinc; [left; reflexivity|].
  apply Forall_cons_iff in HF as [[Hg [Ha Hdg]] HF]. cbn [axes gsize] in Hg, Ha, Hdg.
  unfold used in Hnd, Hinc. cbn [flat_map axes] in Hnd, Hinc. fold (used t) in Hnd, Hinc.
  cbn [shape_of map types_shaped gsize]. fold (shape_of m t).
  apply in_flat_map. exists A. split.
  - apply arrangements_complete.
    + intros a HaA. apply Hm, Ha, HaA.
    + apply NoDup_incl_length; [eapply nodup_app_l; eauto|]. intros a HaA. apply Hinc, in_or_app. left. exact HaA.
    + eapply nodup_app_l; eauto.
    + intros a HaA. apply Hinc, in_or_app. left. exact HaA.
    + exact Hdg.
  - unfold lsize. cbn [axes gsize]. rewrite Nat.eqb_refl. apply in_map. apply IH; auto.
    + eapply nodup_app_r; eauto.
    + intros a Hat. apply without_In. split; [apply Hinc, in_or_app; right; exact Hat|].
      intros HaA. exact (nodup_app_disj _ _ _ a Hnd HaA Hat).
Qed.

Lemma shape_of_eq : forall m t t', map gsize t' = map gsize t -> map (lsize m) t' = map (lsize m) t ->
  shape_of m t' = shape_of m t.
Proof.
  intros m t. induction t as [|D t IH]; intros [|D' t'] Hg Hl; simpl in *; try discriminate; auto.
  injection Hg as Hg1 Hg2. injection Hl as Hl1 Hl2. rewrite Hg1, Hl1, (IH t'); auto.
Qed.

Lemma nth_error_lt : forall A (l : list A) d x, nth_error l d = Some x -> In d (seq 0 (length l)).
Proof.
  intros A l d x H. apply in_seq. split; [lia|]. apply nth_error_Some. congruence.
Qed.

(** Every step the rules accept is a candidate or a permute to a target. *)
Theorem cands_complete : forall m u c v, wf m u -> step m u c v -> (forall t', c <> AllPermute t') ->
  In c (cands m u).
Proof.
  intros m u c v Hu Hs Hp. pose proof Hu as [Hm _]. unfold cands.
  destruct Hs as [d xs P g H Hxs|d xs D H Hxs Hr Hnxs Hus Hdv|d e xs P g E Hde H HE Hxs Hdv|t' Ht' Hg Hl].
  - apply in_flat_map. exists d. split; [eapply nth_error_lt; eauto|].
    rewrite (nth_error_nth _ _ _ H). apply in_or_app. left. apply in_map, suffixes_complete, Hxs.
  - apply in_flat_map. exists d. split; [eapply nth_error_lt; eauto|].
    rewrite (nth_error_nth _ _ _ H). apply in_or_app. right. apply in_or_app. left. apply in_map.
    assert (Hinc : incl xs (without (seq 0 (length m)) (used u))).
    { intros a Ha. apply without_In. split; [apply in_seq; split; [lia|apply Hr, Ha]|apply Hus, Ha]. }
    apply arrangements_complete; [intros a Ha; apply Hm, Hr, Ha|apply NoDup_incl_length|..]; auto.
  - apply in_flat_map. exists d. split; [eapply nth_error_lt; eauto|].
    rewrite (nth_error_nth _ _ _ H). apply in_or_app. right. apply in_or_app. right.
    apply in_flat_map. exists e. split; [eapply nth_error_lt; eauto|]. apply in_map, suffixes_complete, Hxs.
  - exfalso. eapply Hp. reflexivity.
Qed.

Theorem permute_targets_complete : forall m u v, wf m u -> step m u (AllPermute v) v -> In v (permute_targets m u).
Proof.
  intros m u v Hu Hs. inversion Hs as [| | |v' Hv Hg Hl]; subst. pose proof Hv as [Hm [HF Hnd]].
  unfold permute_targets. rewrite <- (shape_of_eq m u v Hg Hl).
  apply types_shaped_complete; auto.
  intros a Ha. apply in_flat_map in Ha as [D [HD Ha]]. apply in_seq. split; [lia|].
  eapply wf_axes_range; eauto.
Qed.

(** * Potentials *)

Lemma lookup_In : forall cert t d, lookup cert t = Some d -> In (t, d) cert.
Proof.
  induction cert as [|[u e] cert IH]; intros t d H; simpl in H; [discriminate|].
  destruct (atype_eqb u t) eqn:E.
  - apply atype_eqb_spec in E. subst. injection H as ->. left. reflexivity.
  - right. apply IH, H.
Qed.

(** Looking up among the entries [f] keeps finds what the whole list does,
    when [f] keeps every entry for the type looked up. *)
Lemma lookup_filter : forall f cert t, (forall e, fst e = t -> f e = true) ->
  lookup (filter f cert) t = lookup cert t.
Proof.
  intros f cert t H. induction cert as [|[u d] cert IH]; simpl; auto.
  destruct (f (u, d)) eqn:E; simpl; destruct (atype_eqb u t) eqn:Eq; auto.
  apply atype_eqb_spec in Eq. subst. rewrite H in E by reflexivity. discriminate.
Qed.

(** The table finds what the certificate does. *)
Lemma tkey_axes_lt : forall xs k, k < nbuckets -> fold_left tkey_axis xs k < nbuckets.
Proof.
  induction xs as [|a xs IH]; intros k Hk; simpl; auto.
  apply IH. unfold tkey_axis, nbuckets. apply Nat.mod_upper_bound. discriminate.
Qed.

Lemma tkey_lt : forall t, tkey t < nbuckets.
Proof.
  intros t. unfold tkey. assert (H0 : 0 < nbuckets) by (unfold nbuckets; lia). revert H0. generalize 0.
  induction t as [|D t IH]; intros k Hk; simpl; auto.
  apply IH. unfold tkey_dim. apply tkey_axes_lt. unfold nbuckets. apply Nat.mod_upper_bound. discriminate.
Qed.

Lemma table_nth : forall cert k, k < nbuckets ->
  nth k (table cert) [] = filter (fun e => tkey (fst e) =? k) cert.
Proof.
  intros cert k Hk. unfold table.
  set (g := fun k => map snd (filter (fun ke => fst ke =? k) (map (fun e => (tkey (fst e), e)) cert))).
  rewrite (nth_indep _ [] (g 0)) by (rewrite map_length, seq_length; exact Hk).
  rewrite map_nth, seq_nth by exact Hk. cbn [Nat.add]. unfold g. clear g.
  induction cert as [|e cert IH]; simpl; auto.
  destruct (tkey (fst e) =? k); simpl; rewrite IH; reflexivity.
Qed.

Lemma blookup_table : forall cert t, blookup (table cert) t = lookup cert t.
Proof.
  intros cert t. unfold blookup. rewrite table_nth by apply tkey_lt.
  apply lookup_filter. intros e E. rewrite E. apply Nat.eqb_refl.
Qed.

Lemma pot_at_least_spec : forall m dst cert look t R, look t = lookup cert t ->
  pot_at_least m dst look t R = true -> R <= pot m dst cert t.
Proof.
  intros m dst cert look t R Hl H. unfold pot_at_least, pot in *. rewrite Hl in H. destruct (lookup cert t).
  - apply Nat.leb_le, H.
  - apply existsb_exists in H as [r [Hr HR]]. apply Nat.leb_le in HR.
    eapply Nat.le_trans; [exact HR|]. unfold lower_bound. apply fold_max_ge, in_map_iff. eauto.
Qed.

(** * Traces *)

Lemma step_gsizes : forall m t c t', step m t c t' -> map gsize t' = map gsize t.
Proof.
  intros m t c t' Hs.
  destruct Hs as [d xs P g H Hxs|d xs D H Hxs Hr Hnxs Hus Hdv|d e xs P g E Hde H HE Hxs Hdv|t' Ht' Hg Hl];
    auto; rewrite ?map_set_nth; cbn [gsize].
  - apply set_nth_same. rewrite nth_error_map, H. reflexivity.
  - apply set_nth_same. rewrite nth_error_map, H. reflexivity.
  - rewrite (set_nth_same _ (map gsize t) d g) by (rewrite nth_error_map, H; reflexivity).
    apply set_nth_same. rewrite nth_error_map, HE. reflexivity.
Qed.

Lemma trace_head : forall m t p ts rs, trace m t p ts rs -> exists ts', ts = t :: ts'.
Proof. intros m t p ts rs H. destruct H; eauto. Qed.

(** What remains of a plan receives at least the lower bound from where it is. *)
Lemma trace_lower_bound : forall m t dst p ts rs, wf m t -> wf m dst -> map gsize t = map gsize dst ->
  trace m t p ts rs -> last ts t = dst -> lower_bound m t dst <= traffic rs.
Proof.
  intros m t dst p ts rs Ht Hd Hg Htr Hl.
  apply (accepted_traffic_lower_bound m t dst p (mkreport ts (peak_of m ts) rs)).
  apply check_ok_iff. cbn [types received peak].
  split; [split; [exact Ht|split; [exact Hd|exact Hg]]|split; [exact Htr|split; [exact Hl|reflexivity]]].
Qed.

Lemma certify_entries : forall m dst cap cert u d, certify m dst cap cert = true -> In (u, d) cert ->
  entry_ok m dst (blookup (table cert)) cap (u, d) = true.
Proof.
  intros m dst cap cert u d H Hin. unfold certify in H. cbv zeta in H. apply andb_true_iff in H as [_ H].
  rewrite forallb_forall in H. apply H, Hin.
Qed.

Lemma edge_ok_spec : forall m dst cert look cap u du c v, (forall t, look t = lookup cert t) ->
  wf m u -> step m u c v -> size m v <= cap ->
  edge_ok m dst look cap u du c = true -> du <= recv m u c v + pot m dst cert v.
Proof.
  intros m dst cert look cap u du c v Hl Hu Hs Hv H. unfold edge_ok in H.
  rewrite (proj2 (apply_spec m u c v Hu) Hs) in H.
  replace (size m v <=? cap) with true in H by (symmetry; apply Nat.leb_le; exact Hv).
  cbn [negb orb] in H. apply orb_true_iff in H as [H|H].
  - apply Nat.leb_le in H. lia.
  - apply (pot_at_least_spec m dst cert look _ _ (Hl v)) in H. lia.
Qed.

Lemma trace_pot : forall m dst cap cert t p ts rs,
  certify m dst cap cert = true -> wf m t -> wf m dst -> map gsize t = map gsize dst ->
  trace m t p ts rs -> last ts t = dst -> Forall (fun u => size m u <= cap) ts ->
  pot m dst cert t <= traffic rs.
Proof.
  intros m dst cap cert t p ts rs Hc Ht Hd Hg Htr. revert Ht Hg.
  induction Htr as [t|t c t1 p ts rs Hs Htr IH]; intros Ht Hg Hl Hcap.
  - simpl in Hl. subst. unfold certify in Hc. cbv zeta in Hc. apply andb_true_iff in Hc as [Hc _].
    apply andb_true_iff in Hc as [_ Hc]. apply Nat.eqb_eq in Hc. cbn [traffic fold_right]. lia.
  - assert (Hne := trace_nonempty _ _ _ _ _ Htr).
    assert (Hl1 : last ts t1 = dst).
    { rewrite last_cons_ne in Hl by exact Hne. rewrite (last_indep _ ts t1 t) by exact Hne. exact Hl. }
    assert (Ht1 : wf m t1) by (eapply step_wf; eauto).
    assert (Hg1 : map gsize t1 = map gsize dst) by (rewrite (step_gsizes m t c t1 Hs); exact Hg).
    apply Forall_cons_iff in Hcap as [Hcap0 Hcap].
    specialize (IH Ht1 Hg1 Hl1 Hcap).
    cbn [traffic fold_right]. fold (traffic rs).
    destruct (lookup cert t) as [d|] eqn:L; unfold pot at 1; rewrite L.
    2: { change (recv m t c t1 + traffic rs) with (traffic (recv m t c t1 :: rs)).
         apply (trace_lower_bound m t dst (c :: p) (t :: ts)); [exact Ht|exact Hd|exact Hg|econstructor; eauto|exact Hl]. }
    pose proof (certify_entries m dst cap cert t d Hc (lookup_In _ _ _ L)) as He.
    unfold entry_ok in He. replace (size m t <=? cap) with true in He by (symmetry; apply Nat.leb_le; lia).
    cbn [negb orb] in He. apply andb_true_iff in He as [He Hperm]. apply andb_true_iff in He as [_ He].
    rewrite forallb_forall in He.
    destruct (trace_head _ _ _ _ _ Htr) as [ts' ->].
    apply Forall_cons_iff in Hcap as [Hcap1 _].
    destruct c as [d' xs|d' xs|d' e xs|t'].
    1-3: assert (Hin : In _ (cands m t)) by (apply (cands_complete m t _ t1 Ht Hs); intros t'' E; discriminate E);
         apply (edge_ok_spec m dst cert _ cap t d _ t1 (blookup_table cert) Ht Hs Hcap1) in He; [lia|exact Hin].
    (* a permute: to a target, when the figure exceeds the block; else it
       receives the whole block, or moves nothing and stays at [t] *)
    destruct (size m t <? d) eqn:Hsd.
    + cbn [negb orb] in Hperm. rewrite forallb_forall in Hperm.
      assert (Ht' : t' = t1) by (inversion Hs; reflexivity). subst t'.
      pose proof (Hperm t1 (permute_targets_complete m t t1 Ht Hs)) as Hok.
      apply (edge_ok_spec m dst cert _ cap t d _ t1 (blookup_table cert) Ht Hs Hcap1) in Hok.
      lia.
    + apply Nat.ltb_ge in Hsd. cbn [recv]. destruct (Checker.moves m t t1) eqn:Hmv; [lia|].
      inversion Hs as [| | |t'' Hw Hgs Hls]; subst.
      unfold certify in Hc. cbv zeta in Hc. apply andb_true_iff in Hc as [Hc _]. apply andb_true_iff in Hc as [Hu _].
      pose proof (unmoved_same m t t1 Hu Ht Hw Hgs Hmv) as ->.
      unfold pot in IH. rewrite L in IH. lia.
Qed.

(** * The theorems *)

(** Every plan the checker accepts from [src] to [dst] whose types all fit
    in [cap] receives at least the potential of [src]. *)
Theorem certify_sound : forall m src dst cap cert p r,
  certify m dst cap cert = true -> check m src dst p = Ok r -> peak r <= cap ->
  pot m dst cert src <= traffic (received r).
Proof.
  intros m src dst cap cert p r Hc Hchk Hpk.
  apply check_ok_iff in Hchk as [[Hs [Hd Hg]] [Htr [Hl Hp]]].
  apply (trace_pot m dst cap cert src p (types r)); auto.
  apply Forall_forall. intros u Hu. pose proof (peak_of_ge m (types r) u Hu). lia.
Qed.

(** A certified figure is the least traffic within [cap]: no accepted plan
    whose types all fit in [cap] receives less. With [cap] the memory bound
    [max(size src, size dst)], those are the plans of least peak. *)
Theorem certify_traffic_minimal : forall m src dst cap T cert p r,
  certify_traffic m src dst cap T cert = true -> check m src dst p = Ok r -> peak r <= cap ->
  T <= traffic (received r).
Proof.
  intros m src dst cap T cert p r H Hchk Hpk. unfold certify_traffic in H.
  apply andb_true_iff in H as [Hc HT]. apply Nat.leb_le in HT.
  pose proof (certify_sound m src dst cap cert p r Hc Hchk Hpk). lia.
Qed.

(** A figure certified over a split of the mesh is the least traffic of any
    accepted plan within [cap], over the split and over the mesh itself
    (carried to the split by [Refineplan.refine_check]). *)
Theorem certify_split_minimal : forall m fs src dst cap T cert,
  certify_split m fs src dst cap T cert = true ->
  (forall p r, check m src dst p = Ok r -> peak r <= cap -> T <= traffic (received r)) /\
  (forall p r, check (rmesh fs) (rtype fs src) (rtype fs dst) p = Ok r -> peak r <= cap ->
     T <= traffic (received r)).
Proof.
  intros m fs src dst cap T cert H. unfold certify_split in H.
  apply andb_true_iff in H as [Hs Hc]. apply nat_list_eqb_spec in Hs.
  assert (Hu : no_unit_axes (rmesh fs) = true).
  { unfold certify_traffic, certify in Hc. cbv zeta in Hc. apply andb_true_iff in Hc as [Hc _].
    apply andb_true_iff in Hc as [Hc _]. apply andb_true_iff in Hc as [Hc _]. exact Hc. }
  split.
  - intros p r Hchk Hpk.
    destruct (refine_check m fs src dst p r Hs Hu Hchk) as [p' [r' [Hchk' [Hp Hle]]]].
    pose proof (certify_traffic_minimal _ _ _ cap T cert _ r' Hc Hchk' ltac:(lia)). lia.
  - intros p r Hchk Hpk. exact (certify_traffic_minimal _ _ _ cap T cert p r Hc Hchk Hpk).
Qed.
