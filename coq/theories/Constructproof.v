(** When the flag is guaranteed: the canonical candidate always passes
    validation when the mesh can hold the counts it uses ([cap_ok]), so the
    synthesizer's flag is set ([synthesize_guaranteed]); [cap_ok] holds on
    meshes of size-2 axes ([synthesize_guaranteed_pow2]) and of prime (or
    unit) axis sizes ([synthesize_guaranteed_prime]). *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types Rules Checker Validate Normalform Synth Synthlib Synthproof.
Import ListNotations.

(** * Room for the counts *)

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
  - apply Forall_forall. intros x Hx. rewrite tyof_map in Hx. apply in_map_iff in Hx.
    destruct Hx as [d [<- Hd]]. apply in_seq in Hd. repeat split; simpl.
    + eapply valid_gs_pos; eauto. lia.
    + intros a Ha. apply Hr, in_allax. exists d. split; [lia|auto].
    + apply (good_div m src dst); auto. lia.
  - rewrite used_tyof. auto.
Qed.

(** The four kinds of steps between types built from dimension functions. *)

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
  - eapply nodup_app_r; eauto.
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
  - rewrite !tyof_map. rewrite !map_map. apply map_ext_in. intros d Hd. apply in_seq in Hd.
    unfold lsize. simpl. rewrite (nprod_cnt_eq m (g d) (f d)); auto.
    intros v. rewrite Hcnt by lia. auto.
Qed.

(** * Pointwise equality of dimension functions *)

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
  - apply (Permutation_NoDup Hp) in Hn. eapply nodup_app_l; eauto.
  - intros a Ha. apply Hr. apply (Permutation_in _ (Permutation_sym Hp)). apply in_or_app; auto.
  - intros d v Hd. specialize (Hc d v Hd). rewrite Hg in Hc by auto. rewrite cnt_app in Hc. lia.
Qed.

(** Growing dimension [d] of [X] by a new axis [a], as the slices and the
    extras do: the axes stay distinct, and the per-size counts stay within
    the larger of [S]'s and [B]'s when [a]'s size was below [B]'s count. *)
Lemma grow_nodup : forall r S X d a, d < r -> NoDup (allax r S ++ allax r X) ->
  ~ In a (allax r S) -> ~ In a (allax r X) -> NoDup (allax r S ++ allax r (upd X d (X d ++ [a]))).
Proof.
  intros r S X d a Hd Hn N1 N2. assert (Hp := allax_upd_app r X d [a] Hd).
  apply (Permutation_NoDup (l := allax r S ++ [a] ++ allax r X)).
  - apply Permutation_app_head. symmetry. exact Hp.
  - simpl. apply nodup_app_intro.
    + eapply nodup_app_l; eauto.
    + constructor; [exact N2|]. eapply nodup_app_r; eauto.
    + intros b Hb [<-|Hb']; [contradiction|]. eapply nodup_app_disj; eauto.
Qed.

Lemma grow_cnt : forall m r S B X d a, d < r ->
  (forall d' v, d' < r -> cnt m v (S d' ++ X d') <= Nat.max (cnt m v (S d')) (cnt m v (B d'))) ->
  cnt m (asize m a) (S d ++ X d) < cnt m (asize m a) (B d) ->
  forall d' v, d' < r ->
    cnt m v (S d' ++ upd X d (X d ++ [a]) d') <= Nat.max (cnt m v (S d')) (cnt m v (B d')).
Proof.
  intros m r S B X d a Hd Hc Hlt d' v Hd'. unfold upd. destruct (Nat.eqb_spec d' d) as [->|Hne]; auto.
  rewrite app_assoc, cnt_app, cnt_single. destruct (Nat.eqb_spec (asize m a) v) as [<-|Hv]; [lia|].
  specialize (Hc d v Hd'). lia.
Qed.

(** * The slices *)

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
    + apply grow_nodup; auto.
    + intros b Hb. apply (Permutation_in _ Hp) in Hb. destruct Hb as [<-|Hb]; auto.
    + apply grow_cnt; auto.
  - split; [|split].
    + rewrite allax_nil, app_nil_r. auto.
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

(** * The extras *)

Definition extras_inv (m : mesh) (r : nat) (D A E : nat -> list nat) : Prop :=
  NoDup (allax r D ++ allax r E) /\ (forall a, In a (allax r E) -> a < length m) /\
  (forall d v, d < r -> cnt m v (D d ++ E d) <= Nat.max (cnt m v (D d)) (cnt m v (A d))) /\
  (forall v, cnt m v (allax r D) + cnt m v (allax r E) <=
             Nat.max (cnt m v (allax r D)) (cnt m v (allax r A))).

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
    + apply grow_nodup; auto.
    + intros b Hb. apply (Permutation_in _ Hp) in Hb. destruct Hb as [<-|Hb]; auto.
    + apply grow_cnt; auto.
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

(** * The problem's own facts *)

Lemma valid_len : forall m src dst, valid_problem m src dst -> length dst = length src.
Proof. intros m src dst [_ [_ H]]. rewrite <- (map_length gsize src), H, map_length. auto. Qed.

Lemma valid_dst_tyof : forall m src dst, valid_problem m src dst -> tyof src (sax dst) = dst.
Proof.
  intros m src dst Hv. rewrite <- (tyof_self dst) at 2. rewrite !tyof_map. rewrite (valid_len m src dst Hv).
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
  - intros a Ha. rewrite <- used_src in Ha. apply (wf_used_lt m src); auto.
  - intros a Ha. rewrite <- Hl, <- used_src in Ha. apply (wf_used_lt m dst); auto.
Qed.

(** * The chains of the canonical construction *)

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
              apply (nodup_app_disj _ _ _ a Hnd Hin Ha).
      * cbv beta. rewrite (tyof_ext src _ _ Heq). apply IH. lia.
Qed.

(** The gathers of dimensions [k-1], ..., [0] (in that order) take the
    type holding [D d ++ E d] below [k] to the one holding [D]. *)
Lemma gathers_chain : forall m src D E k, k <= length src ->
  chain m (tyof src (fun d => if d <? k then D d ++ E d else D d))
    (gathers_of k E) (tyof src D).
Proof.
  intros m src D E k. unfold gathers_of. induction k as [|k IH]; intros Hk.
  - simpl. rewrite (tyof_ext src _ D); [constructor|]. intros d Hd. auto.
  - replace (rev (seq 0 (S k))) with (k :: rev (seq 0 k)) by (rewrite seq_S, rev_app_distr; reflexivity).
    change (flat_map ?f (k :: ?l)) with (f k ++ flat_map f l). cbv beta.
    assert (Heq : feq (length src) (upd (fun d => if d <? S k then D d ++ E d else D d) k (D k))
                                  (fun d => if d <? k then D d ++ E d else D d)).
    { intros d Hd. unfold upd. destruct (Nat.eqb_spec d k).
      - subst. rewrite Nat.ltb_irrefl. auto.
      - destruct (Nat.ltb_spec d k), (Nat.ltb_spec d (S k)); auto; lia. }
    destruct (E k) as [|x xs] eqn:Ek.
    + simpl. rewrite (tyof_ext src _ (fun d => if d <? k then D d ++ E d else D d)).
      * apply IH. lia.
      * intros d Hd. destruct (Nat.eqb_spec d k).
        -- subst. rewrite Nat.ltb_irrefl, (proj2 (Nat.ltb_lt k (S k))) by lia. rewrite Ek, app_nil_r. auto.
        -- destruct (Nat.ltb_spec d k), (Nat.ltb_spec d (S k)); auto; lia.
    + simpl. econstructor.
      * apply step_gather_tyof with (P := D k); [lia| |discriminate].
        rewrite (proj2 (Nat.ltb_lt k (S k))) by lia. rewrite Ek. auto.
      * rewrite (tyof_ext src _ _ Heq). apply IH. lia.
Qed.

(** * The moves *)

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
    + exists v. split; [unfold v; rewrite asize_nth; apply nth_In; auto|].
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

Lemma mu_bound : forall m src dst T C, good m src dst T ->
  mu m (length src) T C <= length m * length m.
Proof.
  intros m src dst T C [Hn [Hr _]]. unfold mu. apply sum_bound. intros v _.
  apply Nat.le_trans with (cnt m v (allax (length src) T)).
  - rewrite cnt_allax_sum. apply sum_le. intros. lia.
  - apply Nat.le_trans with (length (allax (length src) T)); [apply cnt_le_length|].
    apply nodup_in_range_length; auto.
Qed.

(** * The faster folds compute the same functions *)

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

(** Pairs the test refuses whatever the state can be left out. *)
Lemma fold_grow_f_filter : forall okf (q : nat * nat -> bool) ps st,
  (forall X AX p, q p = false -> okf X AX (fst p) (snd p) = false) ->
  fold_left (grow_f okf) (filter q ps) st = fold_left (grow_f okf) ps st.
Proof.
  intros okf q ps. induction ps as [|p ps IH]; intros st Hq; [reflexivity|].
  simpl. destruct (q p) eqn:E; simpl; rewrite IH by auto; [reflexivity|].
  f_equal. unfold grow_f. rewrite (Hq (fst st) (snd st) p E). reflexivity.
Qed.

Lemma slicer_f_eq : forall m r S D budget, slicer_f m r S D budget = slicer m r S D budget.
Proof.
  intros. unfold slicer_f, slicer, slice_step. cbv zeta.
  rewrite pairs_where_filter, fold_grow_f_filter.
  2: { intros X AX [d a] E. simpl in E |- *. unfold slice_ok_f. rewrite E. reflexivity. }
  apply (fold_grow_f r); [|apply pairs_fst|rewrite allax_nil; reflexivity].
  intros X AX d a _ HP. unfold slice_ok_f, slice_ok. rewrite cnt_app.
  rewrite (memb_perm a AX (allax r X) HP), (cnt_perm m _ AX (allax r X) HP). reflexivity.
Qed.

Lemma nth_map_seq_lt : forall (f : nat -> list nat) r d, d < r -> nth d (map f (seq 0 r)) [] = f d.
Proof.
  intros f r d H. rewrite (nth_indep _ [] (f 0)) by (rewrite map_length, seq_length; lia).
  rewrite map_nth, seq_nth by lia. reflexivity.
Qed.

Lemma pairs_where_ext : forall keep r F F' l, (forall d, d < r -> F d = F' d) ->
  pairs_where keep r F l = pairs_where keep r F' l.
Proof.
  intros keep r F F' l H. rewrite !pairs_where_filter. unfold pairs. do 2 f_equal.
  assert (Hin : forall d, In d (seq 0 r) -> F d = F' d) by (intros d Hd; apply in_seq in Hd; apply H; lia).
  clear H. induction (seq 0 r) as [|d ds IH]; simpl; auto.
  rewrite (Hin d) by (left; auto). rewrite IH by (intros; apply Hin; right; auto). reflexivity.
Qed.

Lemma extras_f_eq : forall m r D A, extras_f m r D A = extras m r D A.
Proof.
  intros. unfold extras_f, extras, extra_step. cbv zeta.
  rewrite <- !flat_map_concat_map. fold (allax r D). fold (allax r A).
  rewrite (pairs_where_ext _ r _ A) by (intros; apply nth_map_seq_lt; auto).
  rewrite pairs_where_filter, fold_grow_f_filter.
  2: { intros X AX [d a] E. simpl in E |- *. unfold extra_ok_f. rewrite E. reflexivity. }
  apply (fold_grow_f r); [|apply pairs_fst|rewrite allax_nil; reflexivity].
  intros X AX d a Hd HP. unfold extra_ok_f, extra_ok. rewrite !nth_map_seq_lt by exact Hd. rewrite cnt_app.
  rewrite (memb_perm a AX (allax r X) HP), (cnt_perm m _ AX (allax r X) HP). reflexivity.
Qed.

(** * The canonical plan is accepted *)

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
  unfold finish. rewrite same_axes_tyof. fold pre. split; [|split].
  - eapply chain_app.
    { assert (H0 := slices_chain m src dst Sf X Hv Hc HgA r 0 eq_refl).
      rewrite (tyof_ext src _ Sf) in H0 by (intros; simpl; auto). unfold Sf in H0 at 1.
      rewrite tyof_self in H0. exact H0. }
    eapply chain_app; [exact Hch|].
    assert (HG := gathers_chain m src Df E r (le_n r)).
    rewrite (tyof_ext src _ T) in HG by (intros d Hd; rewrite (proj2 (Nat.ltb_lt d r)) by exact Hd; auto).
    rewrite Hdst in HG.
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
      destruct Hc' as [d [Hd Hc']]. rewrite <- in_rev in Hd. apply in_seq in Hd.
      destruct (E d) as [|x xs] eqn:Ex; [contradiction|]. destruct Hc' as [<-|[]].
      cbn [axes_ok]. apply forallb_forall. intros a Ha. apply negb_true_iff.
      destruct (memb a (used dst)) eqn:Hm; auto. apply memb_spec in Hm. rewrite Hused in Hm.
      exfalso. apply (nodup_app_disj _ _ _ a HEn Hm). apply in_allax. exists d. rewrite Ex.
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

(** * Meshes of size-2 axes *)

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
  - apply Nat.divide_trans with (2 ^ length (sax dst d)); [apply pow_divide_le; lia|].
    rewrite <- (nprod_all2 m (sax dst d)) by auto. rewrite (gs_map src dst Hg d). exact HdD.
  - apply Nat.divide_trans with (2 ^ length (sax src d)); [apply pow_divide_le; lia|].
    rewrite <- (nprod_all2 m (sax src d)) by auto. exact HdS.
Qed.

Theorem synthesize_guaranteed_pow2 : forall m src dst, valid_problem m src dst ->
  (forall a, a < length m -> asize m a = 2) -> fst (synthesize m src dst) = true.
Proof.
  intros. apply synthesize_guaranteed; auto. apply cap_ok_pow2; auto.
Qed.

(** * Meshes of prime (or unit) axis sizes *)

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
  rewrite !nprod_prod in *. apply (prime_prod_divide _ (map (asize m) (sax src d)) (map (asize m) (sax dst d))).
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
